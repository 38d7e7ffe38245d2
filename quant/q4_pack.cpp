// Q4NX packing (quant/q4_gemm.h): validation of the two source layouts and
// one repacking routine they share through a small "source" adapter:
//   code(k, n)    the weight's code c ∈ [0, 15] (int4 w stored as w + 8)
//   zero(r, n)    the shifted zero point z' ∈ [0, 15] of scale row r
//   scale(r, n)   the scale of scale row r (a K block, or the only row)
// so a weight is c − z' times its scale, whichever layout it came from.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "quant/gemm_parallel.h"
#include "quant/q4_gemm.h"

namespace onebit {

using namespace qgemm_detail;

namespace {

inline int nibble(const uint8_t* p, size_t i) { return (p[i / 2] >> (4 * (i & 1))) & 15; }

// narrow_scales: scales a run (on the stack), and from how many the pool helps.
constexpr size_t kNarrowRun = 256;
constexpr size_t kNarrowParallel = size_t{1} << 16;

// The opset-21 form: W [K,N] row-major nibbles; scales and zero points
// [rows][N] with rows = ceil(K/bs), or [N] per channel.
struct OnnxSource {
  const Q4OnnxWeight& w;
  int code(size_t k, size_t n) const {
    return nibble(w.data, k * w.n + n) ^ flip();
  }
  int zero(size_t r, size_t n) const {
    if (!w.zero_points) return w.is_signed ? 8 : w.uint4_zero_point;
    return nibble(w.zero_points, r * w.n + n) ^ flip();
  }
  float scale(size_t r, size_t n) const { return load_q4_float(w.scale_type, w.scales, r * w.n + n); }
  // codes(k, n0 .. n0 + cols): one run of nibbles of row k.
  void codes(size_t k, size_t n0, size_t cols, int* out) const {
    const size_t at = k * w.n + n0;
    const uint8_t* p = w.data + at / 2;
    const int flip = this->flip();
    size_t j = 0;
    if (at % 2) out[j++] = (p++[0] >> 4) ^ flip;
    for (; j + 2 <= cols; j += 2, ++p) {
      out[j] = (p[0] & 15) ^ flip;
      out[j + 1] = (p[0] >> 4) ^ flip;
    }
    if (j < cols) out[j] = (p[0] & 15) ^ flip;
  }
  // Rows k0 .. k0 + rows of columns n0 .. n0 + cols: row by row.
  void group(size_t k0, size_t rows, size_t n0, size_t cols, int (*out)[kQ4NR]) const {
    for (size_t q = 0; q < rows; ++q) codes(k0 + q, n0, cols, out[q]);
  }
  // Row k0's run of columns n0 .. n0 + 16 as whole bytes (the pack
  // ukernel's input), or null when the rows do not start on a byte (odd N).
  const uint8_t* rows(size_t k0, size_t n0) const { return w.n % 2 ? nullptr : w.data + (k0 * w.n + n0) / 2; }
  size_t row_bytes() const { return w.n / 2; }
  // What turns a stored nibble into its code: two's-complement w ↦ w + 8.
  uint8_t flip() const { return w.is_signed ? 8 : 0; }
};

// com.microsoft::MatMulNBits: per column n, ceil(K/bs) blobs of bs/2 bytes.
struct NBitsSource {
  const Q4MatMulNBitsWeight& w;
  size_t blocks;  // ceil(K/bs)
  int code(size_t k, size_t n) const {
    const size_t b = k / w.block_size, i = k % w.block_size;
    return nibble(w.b + (n * blocks + b) * (w.block_size / 2), i);
  }
  int zero(size_t r, size_t n) const {
    using Z = Q4MatMulNBitsWeight::ZeroPoints;
    switch (w.zero_point_type) {
      case Z::kNone: return 8;
      case Z::kPacked: return nibble(static_cast<const uint8_t*>(w.zero_points) + n * ((blocks + 1) / 2), r);
      case Z::kF32:
      case Z::kF16: {
        const float z = load_q4_float(w.zero_point_type == Z::kF32 ? Q4FloatType::kF32 : Q4FloatType::kF16,
                                   w.zero_points, n * blocks + r);
        return static_cast<int>(z);  // checked integral in [0, 15] at construction
      }
    }
    return 8;
  }
  float scale(size_t r, size_t n) const { return load_q4_float(w.scale_type, w.scales, n * blocks + r); }
  const uint8_t* rows(size_t, size_t) const { return nullptr; }  // columns are blobs: no row runs
  size_t row_bytes() const { return 0; }
  uint8_t flip() const { return 0; }
  // Rows k0 .. k0 + rows (at most 8, inside one block: k0 is a multiple of
  // 8 and so is the block size) of columns n0 .. n0 + cols: 4 bytes of each
  // column's blob.
  void group(size_t k0, size_t rows, size_t n0, size_t cols, int (*out)[kQ4NR]) const {
    const size_t bytes = w.block_size / 2;
    for (size_t j = 0; j < cols; ++j) {
      const uint8_t* p = w.b + ((n0 + j) * blocks + k0 / w.block_size) * bytes + (k0 % w.block_size) / 2;
      for (size_t q = 0; q < rows; ++q) out[q][j] = (p[q / 2] >> (4 * (q & 1))) & 15;
    }
  }
};

template <class Source>
std::vector<float> dequantize(const Source& src, size_t k, size_t n, size_t bs) {
  std::vector<float> w(k * n);
  for (size_t kk = 0; kk < k; ++kk) {
    const size_t r = bs ? kk / bs : 0;
    for (size_t j = 0; j < n; ++j)
      w[kk * n + j] = static_cast<float>(src.code(kk, j) - src.zero(r, j)) * src.scale(r, j);
  }
  return w;
}

void check_block_size(size_t bs, const char* layout) {
  if (bs < 16 || bs % 8 != 0)
    fail("Q4 ({}): block_size = {}, expected a multiple of 8 that is at least 16", layout, bs);
}

}  // namespace

std::vector<float> q4_dequantize(const Q4OnnxWeight& w) {
  return dequantize(OnnxSource{w}, w.k, w.n, w.block_size);
}

std::vector<float> q4_dequantize(const Q4MatMulNBitsWeight& w) {
  return dequantize(NBitsSource{w, div_up(w.k, w.block_size)}, w.k, w.n, w.block_size);
}

void Q4Gemm::init(size_t k, size_t n, size_t block_size, const Q4GemmOptions& options) {
  if (k == 0 || n == 0) fail("Q4: K = {}, N = {}, expected both positive", k, n);
  if (options.int8_block < 8 || options.int8_block % 8 != 0)
    fail("Q4: int8_block = {}, expected a positive multiple of 8", options.int8_block);
  k_ = k;
  n_ = n;
  kp_ = round_up(k, kQ4KAlign);
  bs_ = block_size;
  scale_rows_ = bs_ ? div_up(kp_, bs_) : 1;
  panels_ = div_up(n, kQ4NR);
  act_ = options.act;
  int8_block_ = options.int8_block;
  codes_ = AlignedBuffer(panels_ * (kp_ / kQ4GroupK) * sizeof(Q4Group), "Q4 packed codes");
  scales_ = AlignedBuffer(panels_ * scale_rows_ * kQ4NR * sizeof(float), "Q4 scales");
  g_ = AlignedBuffer(panels_ * kQ4NR * sizeof(float), "Q4 zero-point terms");
  bias_ = AlignedBuffer(panels_ * kQ4NR * sizeof(float), "Q4 bias");
  if (options.bias) std::memcpy(bias_.as<float>(), options.bias, n * sizeof(float));
}

template <class Source>
void Q4Gemm::pack(const Source& src, ThreadPool* pool) {
  const size_t real_rows = bs_ ? div_up(k_, bs_) : 1;
  for (size_t r = 0; r < real_rows && !has_zero_; ++r)
    for (size_t j = 0; j < n_; ++j) has_zero_ |= src.zero(r, j) != 8;
  if (has_zero_) zeros_ = AlignedBuffer(panels_ * scale_rows_ * kQ4NR, "Q4 zero points");

  const size_t groups = kp_ / kQ4GroupK;
  split_ranges(pool, panels_, double(k_) * double(n_) >= kMinParallelMacs, [&](size_t p0, size_t p1) {
    // z' and scale of row r, column n; padding rows and columns mean weight 0.
    auto zero_of = [&](size_t r, size_t n) { return n < n_ && r < real_rows ? src.zero(r, n) : 8; };
    // The panels' scales and zero points a scale row at a time: the [K,N]
    // layout holds a row's scales side by side and one panel's rows N apart.
    for (size_t r = 0; r < scale_rows_; ++r)
      for (size_t p = p0; p < p1; ++p) {
        float* scale = scales_.as<float>() + (p * scale_rows_ + r) * kQ4NR;
        uint8_t* zero = has_zero_ ? zeros_.as<uint8_t>() + (p * scale_rows_ + r) * kQ4NR : nullptr;
        for (size_t j = 0, n = p * kQ4NR; j < kQ4NR; ++j, ++n) {
          scale[j] = n < n_ && r < real_rows ? src.scale(r, n) : 0.0f;
          if (zero) zero[j] = static_cast<uint8_t>(zero_of(r, n));
        }
      }
    for (size_t p = p0; p < p1; ++p) {
      const float* scale = scales_.as<float>() + p * scale_rows_ * kQ4NR;
      Q4Group* codes = codes_.as<Q4Group>() + p * groups;
      const size_t n0 = p * kQ4NR;
      double g[kQ4NR] = {};
      int64_t wsum[kQ4NR] = {};
      int z[kQ4NR];
      size_t zrow = SIZE_MAX;
      // A group at a time (kQ4GroupK rows of the panel's kQ4NR columns, one
      // cache line): each row is read as one run of nibbles, rows past K
      // and columns past N are z' (weight 0), and the line is written once.
      // Block sizes are multiples of kQ4GroupK, so a group has one zero row.
      static_assert(kQ4GroupK == 8 && kQ4KAlign % kQ4GroupK == 0);
      // A full panel's whole groups, when the source holds them as row runs,
      // go through the config's pack ukernel a block's run at a time; the
      // rest (and every group of a MatMulNBits source) one group here.
      const size_t cols = std::min(kQ4NR, n_ - n0);  // real columns
      const size_t whole_k = k_ / kQ4GroupK * kQ4GroupK;
      // Rows up to k_end are packed: at a block's end its Σ (c − z') joins g.
      auto close_block = [&](size_t k_end, size_t r) {
        if (k_end != kp_ && !(bs_ && k_end % bs_ == 0)) return;
        for (size_t j = 0; j < kQ4NR; ++j) {
          g[j] += double(scale[r * kQ4NR + j]) * double(wsum[j]);
          wsum[j] = 0;
        }
      };
      for (size_t grp = 0; grp < groups;) {
        const size_t k0 = grp * kQ4GroupK;
        const size_t r = bs_ ? k0 / bs_ : 0;
        if (r != zrow) {
          for (size_t j = 0; j < kQ4NR; ++j) z[j] = zero_of(r, n0 + j);
          zrow = r;
        }
        const uint8_t* run = cols == kQ4NR && k0 < whole_k ? src.rows(k0, n0) : nullptr;
        if (run) {
          const size_t k_end = bs_ ? std::min(whole_k, (r + 1) * bs_) : whole_k;
          const size_t count = (k_end - k0) / kQ4GroupK;
          int32_t sums[kQ4NR] = {};
          config_->pack(run, src.row_bytes(), count, src.flip(), codes + grp, sums);
          for (size_t j = 0; j < kQ4NR; ++j) wsum[j] += sums[j] - int64_t(count * kQ4GroupK) * z[j];
          grp += count;
          close_block(k_end, r);
          continue;
        }
        int c[kQ4GroupK][kQ4NR];
        const size_t rows = k0 < k_ ? std::min(kQ4GroupK, k_ - k0) : 0;  // real rows
        src.group(k0, rows, n0, cols, c);
        for (size_t q = 0; q < kQ4GroupK; ++q)
          for (size_t j = q < rows ? cols : 0; j < kQ4NR; ++j) c[q][j] = z[j];
        uint8_t* bytes = codes[grp].bytes;  // byte j * 4 + q: row q low nibble, row q + 4 high
        for (size_t j = 0; j < kQ4NR; ++j) {
          int sum = 0;
          for (size_t q = 0; q < 4; ++q) {
            bytes[j * 4 + q] = static_cast<uint8_t>(c[q][j] | (c[q + 4][j] << 4));
            sum += c[q][j] + c[q + 4][j];
          }
          wsum[j] += sum - static_cast<int>(kQ4GroupK) * z[j];
        }
        close_block(k0 + kQ4GroupK, r);
        ++grp;
      }
      for (size_t j = 0; j < kQ4NR; ++j) g_.as<float>()[n0 + j] = static_cast<float>(g[j]);  // padding: 0
    }
  });
  narrow_scales(pool);
}

void Q4Gemm::narrow_scales(ThreadPool* pool) {
  if (!config_->f16_scales) return;
  const size_t count = scales_.bytes() / sizeof(float);
  const float* s = scales_.as<float>();
  AlignedBuffer h(count * sizeof(uint16_t), "Q4 scales (float16)");
  uint16_t* d = h.as<uint16_t>();
  // One pass, a run at a time on the vectorised conversions: narrow, widen
  // back, and keep the float16 copy only if every scale came back as it was
  // and is a normal float16 or zero (not a subnormal one).
  std::atomic<bool> exact{true};
  const VecMathConfig& vm = vec_math_config();
  split_ranges(pool, div_up(count, kNarrowRun), count >= kNarrowParallel, [&](size_t r0, size_t r1) {
    float back[kNarrowRun];
    for (size_t i = r0 * kNarrowRun; i < std::min(count, r1 * kNarrowRun) && exact.load(std::memory_order_relaxed);
         i += kNarrowRun) {
      const size_t n = std::min(kNarrowRun, count - i);
      vm.narrow(n, s + i, d + i);
      vm.widen(n, d + i, back);
      for (size_t j = 0; j < n; ++j)
        if (back[j] != s[i + j] || ((d[i + j] & 0x7C00) == 0 && (d[i + j] & 0x7FFF) != 0)) {
          exact.store(false, std::memory_order_relaxed);
          break;
        }
    }
  });
  if (!exact.load()) return;
  scales_h_ = std::move(h);
  scales_ = AlignedBuffer();
}

Q4Gemm::Q4Gemm(const Q4GemmConfig& config, const Q4OnnxWeight& w, const Q4GemmOptions& options, ThreadPool* pool)
    : config_(&config) {
  if (w.block_size) check_block_size(w.block_size, "DequantizeLinear");
  if (!w.data || !w.scales) fail("Q4 (DequantizeLinear): weight data or scales missing");
  if (!w.is_signed && !w.zero_points && (w.uint4_zero_point < 0 || w.uint4_zero_point > 15))
    fail("Q4 (DequantizeLinear): uint4 implicit zero point = {}, expected 0..15", w.uint4_zero_point);
  init(w.k, w.n, w.block_size, options);
  const size_t rows = bs_ ? div_up(w.k, bs_) : 1;
  for (size_t i = 0; i < rows * w.n; ++i)
    if (!std::isfinite(load_q4_float(w.scale_type, w.scales, i)))
      fail("Q4 (DequantizeLinear): scale [{}][{}] is not finite", i / w.n, i % w.n);
  pack(OnnxSource{w}, pool);
}

Q4Gemm::Q4Gemm(const Q4GemmConfig& config, const Q4MatMulNBitsWeight& w, const Q4GemmOptions& options,
               ThreadPool* pool)
    : config_(&config) {
  check_block_size(w.block_size, "MatMulNBits");
  if (w.block_size % 2) fail("Q4 (MatMulNBits): block_size = {} is odd", w.block_size);
  if (!w.b || !w.scales) fail("Q4 (MatMulNBits): B or scales missing");
  using Z = Q4MatMulNBitsWeight::ZeroPoints;
  if (w.zero_point_type != Z::kNone && !w.zero_points) fail("Q4 (MatMulNBits): zero_points missing");
  init(w.k, w.n, w.block_size, options);
  const size_t blocks = div_up(w.k, w.block_size);
  for (size_t i = 0; i < blocks * w.n; ++i) {
    if (!std::isfinite(load_q4_float(w.scale_type, w.scales, i)))
      fail("Q4 (MatMulNBits): scales[{}] (column {}, block {}) is not finite", i, i / blocks, i % blocks);
    if (w.zero_point_type == Z::kF32 || w.zero_point_type == Z::kF16) {
      const float z =
          load_q4_float(w.zero_point_type == Z::kF32 ? Q4FloatType::kF32 : Q4FloatType::kF16, w.zero_points, i);
      if (!(z >= 0 && z <= 15 && z == std::floor(z)))
        fail("Q4 (MatMulNBits): zero_points[{}] = {}, expected an integer in [0, 15] (the integer kernels "
             "cannot represent a fractional zero point)",
             i, z);
    }
  }
  pack(NBitsSource{w, blocks}, pool);
}

}  // namespace onebit
