#include "ops/kv_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "ops/op_util.h"
#include "ops/sgemm.h"

namespace onebit {

namespace {

// Up to this many rows read V in place (decode, a verification pass of a
// few drafts); more rows reuse V enough to pay for the GEMM's packing.
bool mixes_in_place(const KvGemmConfig& cfg, size_t m) { return m <= 4 * cfg.f32->mr; }

// Work below this many multiply-adds stays on the calling thread.
constexpr size_t kMinParallel = size_t{1} << 16;

void check_dtype(KvRows r) {
  if (r.dtype != DType::F32 && r.dtype != DType::F16 && (r.dtype != DType::I8 || !r.scales))
    fail("the KV cache is {}, expected float32, float16 or int8 with scales", dtype_name(r.dtype));
}

// fn(begin, end) over [0, n) in runs of whole `block`s, one per thread of the pool.
template <class Fn>
void split(ThreadPool* pool, size_t n, size_t block, size_t work, Fn&& fn) {
  const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
  const size_t blocks = (n + block - 1) / block;
  if (threads < 2 || blocks < 2 || work < kMinParallel) return fn(size_t{0}, n);
  const size_t per = (blocks + threads - 1) / threads * block;
  pool->run(static_cast<int64_t>((n + per - 1) / per), [&](int64_t r) {
    const size_t b = static_cast<size_t>(r) * per;
    fn(b, std::min(n, b + per));
  });
}

// A prompt's rows of P end in exact zeros where a causal mask hid the keys
// (Softmax gives exactly 0 there). Rows go in blocks of kMixRows, each
// multiplied only up to the last nonzero P of its rows. No bit changes:
// every output is one FMA chain along the keys in order, however the GEMM
// blocks them (ops/sgemm.cpp), and a trailing 0·v adds a zero to a chain
// that starts at +0 — unless v is not finite (0·inf is NaN), so a block
// always runs past the last value row holding one.
constexpr size_t kMixRows = 64;

// A float's bits without the sign: 0 for ±0 only.
inline uint32_t magnitude_bits(const float* p) {
  uint32_t b;
  std::memcpy(&b, p, sizeof b);
  return b & 0x7fffffffu;
}

// The largest of n elements' bits without the sign, masked by `mask`: one
// max over the run, a loop the compiler vectorises (not inlined, so it stays
// a loop and is not unrolled into scalar code for a constant n).
[[gnu::noinline]] uint32_t max_bits(const float* p, size_t n, uint32_t mask) {
  uint32_t top = 0;
  for (size_t i = 0; i < n; ++i) top = std::max(top, magnitude_bits(p + i) & mask);
  return top;
}

// One past the last nonzero of p's n elements, or `floor` when there is
// none at or after it (NaN counts as nonzero): eight at a time from the end
// first (a prompt's rows of P end in long runs of zeros), then one by one.
size_t nonzero_end(const float* p, size_t n, size_t floor) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  while (n >= floor + 8 && _mm256_testz_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + n - 8)),
                                              magnitude))
    n -= 8;
  while (n > floor && magnitude_bits(p + n - 1) == 0) --n;
  return n;
}

// Whether all n elements are finite: no exponent field is all ones.
bool all_finite(const float* p, size_t n) { return max_bits(p, n, 0x7f800000u) != 0x7f800000u; }
bool all_finite(const uint16_t* p, size_t n) {
  uint16_t top = 0;
  for (size_t i = 0; i < n; ++i) top = std::max<uint16_t>(top, p[i] & 0x7c00u);
  return top != 0x7c00u;
}
bool all_finite(const int8_t* codes, float scale, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(q8_value(scale, codes[i]))) return false;
  return true;
}

void mix_blocks(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v,
                float* y, size_t ldy, void* workspace, ThreadPool* pool) {
  // Blocks of kMixRows; the last takes a remainder under half a block, so
  // no block is a single row (the GEMV path) when m is not.
  std::vector<size_t> starts;
  for (size_t r = 0; r < m; r = m - r < kMixRows + kMixRows / 2 ? m : r + kMixRows) starts.push_back(r);
  std::vector<size_t> ends(starts.size());
  size_t lowest = t;
  for (size_t b = 0; b < starts.size(); ++b) {
    const size_t r1 = b + 1 < starts.size() ? starts[b + 1] : m;
    // The last row first: a causal block's longest, so the rows before it
    // look only past its end.
    size_t e = 0;
    for (size_t r = r1; r-- > starts[b] && e < t;) e = nonzero_end(p + r * ldp, t, e);
    ends[b] = e;
    lowest = std::min(lowest, e);
  }
  if (lowest == t) return sgemm(*cfg.f32, m, d, t, p, ldp, false, v, d, false, nullptr, y, ldy, workspace, pool);
  const size_t finite_from = kv_finite_end({v, DType::F32}, t, d, lowest);
  for (size_t& e : ends) e = std::max(e, finite_from);
  sgemm_row_blocks(*cfg.f32, m, d, t, p, ldp, v, d, starts.data(), ends.data(), starts.size(), y, ldy, workspace, pool);
}

}  // namespace

KvGemmConfig kv_gemm_config() { return {&sgemm_config(), &kv_config()}; }

KvRows kv_state_head(const void* base, DType dtype, int64_t head_stride, int64_t index, int64_t t, int64_t d) {
  const auto* b = static_cast<const unsigned char*>(base);
  if (dtype == DType::I8) {
    if (d <= 0 || d % 4 != 0) fail("an int8 KV state needs a head size that is a multiple of 4, got {}", d);
    const int64_t capacity = head_stride / (d + 4);
    if (head_stride % (d + 4) != 0 || capacity < t)
      fail("int8 KV heads are {} bytes apart: not rows of {} codes and a scale for {} positions", head_stride, d, t);
    const unsigned char* head = b + static_cast<size_t>(index * head_stride);
    return {head, dtype, reinterpret_cast<const float*>(head + static_cast<size_t>(capacity * d))};
  }
  if (head_stride < t * d) fail("KV heads are {} elements apart, less than {} positions of {}", head_stride, t, d);
  return {b + static_cast<size_t>(index * head_stride) * dtype_bytes(dtype, 1), dtype};
}

size_t kv_finite_end(KvRows rows, size_t t, size_t d, size_t floor) {
  check_dtype(rows);
  for (size_t j = t; j > floor; --j) {
    const size_t at = (j - 1) * d;
    const bool finite = rows.dtype == DType::F32   ? all_finite(static_cast<const float*>(rows.data) + at, d)
                        : rows.dtype == DType::F16 ? all_finite(static_cast<const uint16_t*>(rows.data) + at, d)
                                                   : all_finite(static_cast<const int8_t*>(rows.data) + at,
                                                                rows.scales[j - 1], d);
    if (!finite) return j;
  }
  return floor;
}

size_t kv_mix_workspace(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, DType kv) {
  if (mixes_in_place(cfg, m)) return 0;
  const size_t gemm = align64(sgemm_workspace(*cfg.f32, m, d, t, false, false));
  return kv == DType::F16 || kv == DType::I8 ? align64(t * d * sizeof(float)) + gemm : gemm;
}

void kv_scores(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* q, size_t ldq, KvRows k,
               float* scores, size_t ldc, ThreadPool* pool) {
  check_dtype(k);
  // Keys split over the pool: each score is computed the same wherever it runs.
  split(pool, t, 64, m * t * d, [&](size_t j0, size_t j1) {
    if (k.dtype == DType::F32)
      cfg.kv->qk_f32(m, j1 - j0, d, q, ldq, static_cast<const float*>(k.data) + j0 * d, d, scores + j0, ldc);
    else if (k.dtype == DType::F16)
      cfg.kv->qk_f16(m, j1 - j0, d, q, ldq, static_cast<const uint16_t*>(k.data) + j0 * d, d, scores + j0, ldc);
    else
      cfg.kv->qk_q8(m, j1 - j0, d, q, ldq, static_cast<const int8_t*>(k.data) + j0 * d, d, k.scales + j0,
                    scores + j0, ldc);
  });
}

void kv_mix(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* p, size_t ldp, KvRows v, float* y,
            size_t ldy, void* workspace, ThreadPool* pool) {
  check_dtype(v);
  if (m == 0 || d == 0) return;
  if (mixes_in_place(cfg, m)) {
    // Columns split over the pool, in the kernel's blocks of 32.
    split(pool, d, 32, m * t * d, [&](size_t c0, size_t c1) {
      if (v.dtype == DType::F32)
        cfg.kv->pv_f32(m, t, c1 - c0, p, ldp, static_cast<const float*>(v.data) + c0, d, y + c0, ldy);
      else if (v.dtype == DType::F16)
        cfg.kv->pv_f16(m, t, c1 - c0, p, ldp, static_cast<const uint16_t*>(v.data) + c0, d, y + c0, ldy);
      else
        cfg.kv->pv_q8(m, t, c1 - c0, p, ldp, static_cast<const int8_t*>(v.data) + c0, d, v.scales, y + c0, ldy);
    });
    return;
  }
  const float* vf = static_cast<const float*>(v.data);
  void* gemm_ws = workspace;
  if (v.dtype == DType::F16 || v.dtype == DType::I8) {
    // The values widened once (float16: exactly; int8: q8_value), then the float GEMM.
    float* wide = static_cast<float*>(workspace);
    if (v.dtype == DType::F16) {
      cfg.kv->widen(t * d, static_cast<const uint16_t*>(v.data), wide);
    } else {
      const auto* codes = static_cast<const int8_t*>(v.data);
      for (size_t j = 0; j < t; ++j)
        for (size_t i = 0; i < d; ++i) wide[j * d + i] = q8_value(v.scales[j], codes[j * d + i]);
    }
    vf = wide;
    gemm_ws = static_cast<unsigned char*>(workspace) + align64(t * d * sizeof(float));
  }
  mix_blocks(cfg, m, t, d, p, ldp, vf, y, ldy, gemm_ws, pool);
}

}  // namespace onebit
