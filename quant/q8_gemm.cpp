// A8W8 driver: validation, packing, the lazy column sums, the per-call row
// sums, and threading around the microkernels of one Q8GemmConfig. The
// arithmetic is stated in quant/q8_gemm.h and quant/ukernels/q8_ukernels.h.
#include "quant/q8_gemm.h"

#include <cmath>
#include <cstring>
#include <string>

#include "base/error.h"
#include "quant/gemm_parallel.h"

namespace onebit {

using namespace qgemm_detail;

namespace {

const char* type_name(Q8Type t) { return t == Q8Type::kS8 ? "int8" : "uint8"; }
int32_t type_min(Q8Type t) { return t == Q8Type::kS8 ? -128 : 0; }
int32_t type_max(Q8Type t) { return t == Q8Type::kS8 ? 127 : 255; }

void check_count(const char* what, size_t count, size_t per_axis, const char* axis) {
  if (count != 1 && count != per_axis)
    fail("A8W8: {} has {} values, expected 1 (per tensor) or {} (per {})", what, count, per_axis, axis);
}

void check_scales(const char* what, const float* s, size_t count) {
  if (!s) fail("A8W8: {} is missing", what);
  for (size_t i = 0; i < count; ++i)
    if (!(std::isnormal(s[i]) && s[i] > 0))
      fail("A8W8: {}[{}] = {}, expected a positive normal float32", what, i, s[i]);
}

void check_zero_points(const char* what, const int32_t* z, size_t count, Q8Type t) {
  if (!z) return;
  for (size_t i = 0; i < count; ++i)
    if (z[i] < type_min(t) || z[i] > type_max(t))
      fail("A8W8: {}[{}] = {}, expected a {} value in [{}, {}]", what, i, z[i], type_name(t), type_min(t),
           type_max(t));
}

// The weight offset of the operand domain (quant/q8_ukernels.h).
int32_t operand_delta(Q8Type x, Q8Type w) {
  if (x == Q8Type::kS8) return w == Q8Type::kS8 ? 128 : 0;
  return w == Q8Type::kS8 ? 0 : -128;
}

// Σ_k x[m][k], and for int16 families x widened into pairs (zero past K).
template <class X>
void prepare_rows(size_t m0, size_t m1, size_t k, const X* x, size_t lda, int32_t* row_sum, int16_t* wide,
                  size_t k2) {
  for (size_t i = m0; i < m1; ++i) {
    const X* row = x + i * lda;
    int32_t s = 0;
    for (size_t kk = 0; kk < k; ++kk) s += row[kk];
    row_sum[i] = s;
    if (wide) {
      int16_t* dst = wide + i * k2;
      for (size_t kk = 0; kk < k; ++kk) dst[kk] = row[kk];
      for (size_t kk = k; kk < k2; ++kk) dst[kk] = 0;
    }
  }
}

constexpr size_t kRowSumAlign = 64;

// p = w + delta as a byte is w's byte XOR 0x80 for every weight and both
// nonzero deltas: int8 w + 128 and uint8 w − 128, modulo 256.
constexpr bool operand_flip_is_exact() {
  for (int b = 0; b < 256; ++b) {
    const int s = b < 128 ? b : b - 256;  // the byte as int8
    if (((s + 128) & 255) != (b ^ 0x80) || ((b - 128) & 255) != (b ^ 0x80)) return false;
  }
  return true;
}

}  // namespace

Q8Gemm::Q8Gemm(const Q8GemmConfig& config, const Q8Weight& w, ThreadPool* pool)
    : config_(&config), k_(w.k), n_(w.n), x_type_(w.x_type), lazy_(std::make_unique<Lazy>()) {
  if (w.k > kQ8MaxK)
    fail("A8W8: K = {} exceeds {}, the largest K whose worst-case accumulator (K·255·255) fits in int32", w.k,
         kQ8MaxK);
  if (!w.data && w.k * w.n > 0) fail("A8W8: weight data is missing");
  const size_t ldw = w.ldw ? w.ldw : w.n;
  if (ldw < w.n) fail("A8W8: weight row stride {} is less than N = {}", ldw, w.n);
  check_count("weight scale", w.scale_count, w.n, "column");
  check_scales("weight scale", w.scale, w.scale_count);
  if (w.zero_point) check_count("weight zero point", w.zero_point_count, w.n, "column");
  check_zero_points("weight zero point", w.zero_point, w.zero_point_count, w.type);

  const size_t nr = config.nr, kr = config.kr;
  kr_ = round_up(k_, kr);
  panels_ = div_up(n_, nr);
  const size_t npad = panels_ * nr;
  delta_ = operand_delta(w.x_type, w.type);
  packed_bytes_ = panels_ * kr_ * nr;
  packed_ = AlignedBuffer(packed_bytes_, "an A8W8 packed weight");
  c1_ = AlignedBuffer(npad * sizeof(int32_t), "A8W8 column terms");
  cz_ = AlignedBuffer(npad * sizeof(int32_t), "A8W8 column sums");
  sw_ = AlignedBuffer(npad * sizeof(double), "A8W8 weight scales");

  int32_t* c1 = c1_.as<int32_t>();
  double* sw = sw_.as<double>();
  for (size_t j = 0; j < n_; ++j) {
    const int32_t zw = w.zero_point ? w.zero_point[w.zero_point_count == 1 ? 0 : j] : 0;
    c1[j] = delta_ + zw;
    sw[j] = w.scale[w.scale_count == 1 ? 0 : j];
  }

  // [panel][k / KR][NR][KR]: p = w + delta, which for delta = ±128 is the
  // weight's byte with its top bit flipped (and the byte itself for 0);
  // padding stays 0. A full panel's whole KR-row groups go through the
  // config's pack ukernel, the rest a byte at a time.
  static_assert(operand_flip_is_exact());
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  uint8_t* dst = packed_.as<uint8_t>();
  const uint8_t flip = delta_ ? 0x80 : 0;
  const size_t k = k_, n = n_, whole = k / kr * kr;
  split_ranges(pool, panels_, double(k) * double(n) >= kMinParallelMacs, [&](size_t p0, size_t p1) {
    for (size_t p = p0; p < p1; ++p) {
      uint8_t* panel = dst + p * kr_ * nr;
      const size_t cols = n - p * nr < nr ? n - p * nr : nr;
      const size_t k0 = cols == nr ? whole : 0;
      if (k0) config.pack(src + p * nr, ldw, k0 / kr, nr, flip, panel);
      for (size_t kk = k0; kk < k; ++kk) {
        const uint8_t* row = src + kk * ldw + p * nr;
        uint8_t* g = panel + (kk / kr) * nr * kr + kk % kr;
        for (size_t j = 0; j < cols; ++j) g[j * kr] = static_cast<uint8_t>(row[j] ^ flip);
      }
    }
  });
}

// cz[n] = Σ_k (w − zw[n]) = Σ_k p − K·(delta + zw[n]) = Σ_k p − K·c1[n].
const int32_t* Q8Gemm::colsums() const {
  std::call_once(lazy_->once, [&] {
    // One linear pass over the packed panels; padding bytes are 0.
    const size_t nr = config_->nr, kr = config_->kr;
    const bool p_signed = x_type_ == Q8Type::kU8;  // p is signed when x is unsigned
    const uint8_t* p = packed_.as<uint8_t>();
    const int32_t* c1 = c1_.as<int32_t>();
    int32_t* cz = cz_.as<int32_t>();
    for (size_t panel = 0; panel < panels_; ++panel) {
      int32_t* sum = cz + panel * nr;  // |Σ p| ≤ K·128 fits
      for (size_t g = 0; g < kr_ / kr; ++g)
        for (size_t j = 0; j < nr; ++j)
          for (size_t t = 0; t < kr; ++t, ++p) sum[j] += p_signed ? int32_t(static_cast<int8_t>(*p)) : int32_t(*p);
    }
    for (size_t j = 0; j < n_; ++j) cz[j] -= static_cast<int32_t>(k_) * c1[j];
    lazy_->computed.store(true);
  });
  return cz_.as<int32_t>();
}

size_t Q8Gemm::workspace_bytes_for(const Q8GemmConfig& config, size_t m, size_t k) {
  size_t bytes = round_up(m * sizeof(int32_t), kRowSumAlign);
  if (config.int16_acts) bytes += m * round_up(k, 2) * sizeof(int16_t);
  return bytes;
}

void Q8Gemm::run(size_t m, const void* x, size_t lda, const Q8Activation& xp, float* y, size_t ldy,
                    void* workspace, ThreadPool* pool) const {
  run_impl(m, x, lda, xp, Q8Out::kF32, Q8Requant{}, y, ldy, workspace, pool);
}

void Q8Gemm::run(size_t m, const void* x, size_t lda, const Q8Activation& xp, const Q8OutputQuant& rq, void* y,
                    size_t ldy, void* workspace, ThreadPool* pool) const {
  if (!(std::isnormal(rq.scale) && rq.scale > 0))
    fail("A8W8: output scale = {}, expected a positive normal float32", rq.scale);
  check_zero_points("output zero point", &rq.zero_point, 1, rq.type);
  const Q8Out out = rq.type == Q8Type::kS8 ? Q8Out::kS8 : Q8Out::kU8;
  run_impl(m, x, lda, xp, out, make_q8_requant(rq.scale, rq.zero_point, out), y, ldy, workspace, pool);
}

void Q8Gemm::epilogue(size_t m, const int32_t* acc, size_t ldacc, const Q8Activation& xp, float* y,
                      size_t ldy) const {
  epilogue_impl(m, acc, ldacc, xp, Q8Out::kF32, Q8Requant{}, y, ldy);
}

void Q8Gemm::epilogue(size_t m, const int32_t* acc, size_t ldacc, const Q8Activation& xp, const Q8OutputQuant& rq,
                      void* y, size_t ldy) const {
  if (!(std::isnormal(rq.scale) && rq.scale > 0))
    fail("A8W8: output scale = {}, expected a positive normal float32", rq.scale);
  check_zero_points("output zero point", &rq.zero_point, 1, rq.type);
  const Q8Out out = rq.type == Q8Type::kS8 ? Q8Out::kS8 : Q8Out::kU8;
  epilogue_impl(m, acc, ldacc, xp, out, make_q8_requant(rq.scale, rq.zero_point, out), y, ldy);
}

void Q8Gemm::epilogue_impl(size_t m, const int32_t* acc, size_t ldacc, const Q8Activation& xp, Q8Out out,
                           const Q8Requant& rq, void* y, size_t ldy) const {
  check_count("activation scale", xp.scale_count, m, "row");
  check_scales("activation scale", xp.scale, xp.scale_count);
  q8_epilogue(m, n_, acc, ldacc, xp.scale, xp.scale_count > 1 ? 1 : 0, sw_.as<double>(), out, rq, y, ldy);
}

// q8_store_scalar's arithmetic (quant/ukernels/q8_gemm__scalar.cpp) on an
// accumulator that is already exact.
void q8_epilogue(size_t m, size_t n, const int32_t* acc, size_t ldacc, const float* sx, size_t sx_step,
                 const double* sw, Q8Out out, const Q8Requant& rq, void* y, size_t ldy) {
  for (size_t i = 0; i < m; ++i) {
    const double sxi = double(sx[i * sx_step]);
    const int32_t* a = acc + i * ldacc;
    for (size_t j = 0; j < n; ++j) {
      const double s = sxi * sw[j];
      switch (out) {
        case Q8Out::kF32: static_cast<float*>(y)[i * ldy + j] = q8_to_f32(a[j], s); break;
        case Q8Out::kS8: static_cast<int8_t*>(y)[i * ldy + j] = static_cast<int8_t>(q8_requantize(a[j], s, rq)); break;
        case Q8Out::kU8:
          static_cast<uint8_t*>(y)[i * ldy + j] = static_cast<uint8_t>(q8_requantize(a[j], s, rq));
          break;
      }
    }
  }
}

void Q8Gemm::run_impl(size_t m, const void* x, size_t lda, const Q8Activation& xp, Q8Out out,
                         const Q8Requant& rq, void* y, size_t ldy, void* workspace, ThreadPool* pool) const {
  if (m == 0 || n_ == 0) return;
  if (lda < k_) fail("A8W8: activation row stride {} is less than K = {}", lda, k_);
  if (ldy < n_) fail("A8W8: output row stride {} is less than N = {}", ldy, n_);
  check_count("activation scale", xp.scale_count, m, "row");
  check_scales("activation scale", xp.scale, xp.scale_count);
  if (xp.zero_point) check_count("activation zero point", xp.zero_point_count, m, "row");
  check_zero_points("activation zero point", xp.zero_point, xp.zero_point_count, x_type_);

  const Q8GemmConfig& cfg = *config_;
  const size_t k2 = round_up(k_, 2);
  int32_t* row_sum = static_cast<int32_t*>(workspace);
  int16_t* wide = cfg.int16_acts ? reinterpret_cast<int16_t*>(static_cast<char*>(workspace) +
                                                                round_up(m * sizeof(int32_t), kRowSumAlign))
                                 : nullptr;
  const bool xs = x_type_ == Q8Type::kS8;
  split_ranges(pool, m, double(m) * double(k_) >= kMinParallelMacs, [&](size_t m0, size_t m1) {
    if (xs) prepare_rows(m0, m1, k_, static_cast<const int8_t*>(x), lda, row_sum, wide, k2);
    else prepare_rows(m0, m1, k_, static_cast<const uint8_t*>(x), lda, row_sum, wide, k2);
  });

  static const int32_t kZero = 0;
  Q8Epilogue ep;
  ep.row_sum = row_sum;
  ep.zx = xp.zero_point ? xp.zero_point : &kZero;
  ep.zx_step = xp.zero_point && xp.zero_point_count > 1 ? 1 : 0;
  ep.sx = xp.scale;
  ep.sx_step = xp.scale_count > 1 ? 1 : 0;
  ep.c1 = c1_.as<int32_t>();
  ep.sw = sw_.as<double>();
  ep.out = out;
  ep.rq = rq;
  bool asymmetric = false;
  for (size_t i = 0; xp.zero_point && i < xp.zero_point_count; ++i) asymmetric |= xp.zero_point[i] != 0;
  ep.cz = asymmetric ? colsums() : nullptr;

  const size_t nr = cfg.nr, es = out == Q8Out::kF32 ? 4 : 1;
  const size_t panel_bytes = kr_ * nr;
  const uint8_t* packed = packed_.as<uint8_t>();
  char* c = static_cast<char*>(y);
  const void* a = wide ? static_cast<const void*>(wide) : x;
  const size_t a_ld = wide ? k2 : lda, a_es = wide ? sizeof(int16_t) : 1;
  const bool worth = double(m) * double(k_) * double(n_) >= kMinParallelMacs;

  if (m == 1 && cfg.gemv_streams[xs]) {
    // One row: two contiguous shares of the panels a thread (taken
    // dynamically), each read as the family's stream count of sub-ranges
    // side by side, so each thread keeps several long streams in flight.
    const Q8GemvStreamsUkernel gemv = cfg.gemv_streams[xs];
    run_streams(pool, panels_, cfg.streams, worth, [&](const size_t* panel, size_t live) {
      const uint8_t* w[kMaxDecodeStreams];
      size_t n0[kMaxDecodeStreams], nc[kMaxDecodeStreams];
      void* out[kMaxDecodeStreams];
      for (size_t s = 0; s < live; ++s) {
        w[s] = packed + panel[s] * panel_bytes;
        n0[s] = panel[s] * nr;
        nc[s] = n_ - n0[s] < nr ? n_ - n0[s] : nr;
        out[s] = c + n0[s] * es;
      }
      gemv(live, k_, a, w, n0, nc, ep, out);
    });
    return;
  }
  if (m == 1) {
    const size_t per_call = cfg.gemv_nc / nr, calls = div_up(panels_, per_call);
    const Q8GemvUkernel gemv = cfg.gemv[xs];
    const size_t grain = div_up(kDecodeRunBytes, per_call * panel_bytes);
    split_runs(pool, calls, grain, worth, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) {
        const size_t n0 = i * cfg.gemv_nc, nc = n_ - n0 < cfg.gemv_nc ? n_ - n0 : cfg.gemv_nc;
        gemv(nc, k_, a, packed + i * per_call * panel_bytes, panel_bytes, 0, n0, ep, c + n0 * es);
      }
    });
    return;
  }
  // Tiles of gemm_nc columns (one or more panels).
  const Q8GemmUkernel gemm = cfg.gemm[xs];
  const size_t per_tile = cfg.gemm_nc / nr, col_tiles = div_up(panels_, per_tile);
  run_tiles(pool, m, col_tiles, cfg.mr, worth, [&](size_t row0, size_t row1, size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      const size_t n0 = t * cfg.gemm_nc, nc = n_ - n0 < cfg.gemm_nc ? n_ - n0 : cfg.gemm_nc;
      for (size_t i = row0; i < row1; i += cfg.mr) {
        const size_t mr = row1 - i < cfg.mr ? row1 - i : cfg.mr;
        gemm(mr, nc, k_, static_cast<const char*>(a) + i * a_ld * a_es, a_ld, packed + t * per_tile * panel_bytes,
             panel_bytes, i, n0, ep, c + (i * ldy + n0) * es, ldy);
      }
    }
  });
}

}  // namespace onebit
