#include "quant/nbits8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "base/sizes.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

// Block i's zero point (i = n·blocks + b), checked an integer in [0, 255].
int zero_point(const Q4MatMulNBitsWeight& w, size_t i) {
  using Z = Q4MatMulNBitsWeight::ZeroPoints;
  switch (w.zero_point_type) {
    case Z::kNone: return 128;
    case Z::kPacked: return static_cast<const uint8_t*>(w.zero_points)[i];
    case Z::kF32:
    case Z::kF16: {
      const float z = load_q4_float(w.zero_point_type == Z::kF32 ? Q4FloatType::kF32 : Q4FloatType::kF16,
                                 w.zero_points, i);
      if (!(z >= 0 && z <= 255 && z == std::floor(z)))
        fail("MatMulNBits (8 bits): zero_points[{}] = {}, expected an integer in [0, 255] (the integer kernels "
             "cannot represent a fractional zero point)",
             i, z);
      return static_cast<int>(z);
    }
  }
  return 128;
}

void check(const Q4MatMulNBitsWeight& w) {
  if (w.k == 0 || w.n == 0) fail("MatMulNBits (8 bits): K = {}, N = {}, expected both positive", w.k, w.n);
  if (w.block_size < 16 || w.block_size % 8 != 0)
    fail("MatMulNBits (8 bits): block_size = {}, expected a multiple of 8 that is at least 16", w.block_size);
  if (!w.b || !w.scales) fail("MatMulNBits (8 bits): B or scales missing");
  if (w.zero_point_type != Q4MatMulNBitsWeight::ZeroPoints::kNone && !w.zero_points)
    fail("MatMulNBits (8 bits): zero_points missing");
}

}  // namespace

size_t NBits8Split::split_k(size_t k, size_t bs) {
  return static_cast<size_t>(checked_mul(2 * ceil_div(static_cast<int64_t>(k), static_cast<int64_t>(bs)),
                                         static_cast<int64_t>(bs), "the split K"));
}

NBits8Split::NBits8Split(const Q4MatMulNBitsWeight& w, ThreadPool* pool) {
  check(w);
  const size_t bs = w.block_size, blocks = static_cast<size_t>(ceil_div(w.k, bs));
  const size_t cells = static_cast<size_t>(checked_mul(w.n, blocks, "N·blocks"));
  // Split block pairs: codes [N][2·blocks][bs/2], scales [N][2·blocks], the
  // zero points two nibbles a byte (zh for block 2b in the low nibble, zl
  // for 2b + 1 in the high one).
  b_.resize(static_cast<size_t>(checked_mul(cells, bs, "the split codes")));
  scale_.resize(2 * cells);
  zero_.resize(cells);
  std::vector<uint8_t> pad(cells);  // each block's zero point: the code past K
  for (size_t i = 0; i < cells; ++i) {
    const float s = load_q4_float(w.scale_type, w.scales, i);
    if (!std::isfinite(s) || !std::isfinite(16 * s))
      fail("MatMulNBits (8 bits): scales[{}] (column {}, block {}) = {}, expected finite (and 16 times it)", i,
           i / blocks, i % blocks, s);
    const int z = zero_point(w, i);
    scale_[2 * i] = 16 * s;
    scale_[2 * i + 1] = s;
    zero_[i] = static_cast<uint8_t>((z >> 4) | (z & 15) << 4);
    pad[i] = static_cast<uint8_t>(z);
  }
  // The codes, block by block (a whole block as straight-line byte work the
  // compiler vectorises; the short last one padded), over the pool.
  auto split_blocks = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const size_t len = std::min(bs, w.k - (i % blocks) * bs);
      const uint8_t* src = w.b + i * bs;
      uint8_t* hi = b_.data() + i * bs;
      uint8_t* lo = hi + bs / 2;
      if (len == bs) {
        for (size_t t = 0; t < bs / 2; ++t) {
          const uint8_t c0 = src[2 * t], c1 = src[2 * t + 1];
          hi[t] = static_cast<uint8_t>((c0 >> 4) | (c1 & 0xF0));
          lo[t] = static_cast<uint8_t>((c0 & 15) | (c1 & 15) << 4);
        }
        continue;
      }
      for (size_t t = 0; t < bs; t += 2) {
        const uint8_t c0 = t < len ? src[t] : pad[i];
        const uint8_t c1 = t + 1 < len ? src[t + 1] : pad[i];
        hi[t / 2] = static_cast<uint8_t>((c0 >> 4) | (c1 & 0xF0));
        lo[t / 2] = static_cast<uint8_t>((c0 & 15) | (c1 & 15) << 4);
      }
    }
  };
  if (pool && pool->size() > 1 && cells >= 4096)
    pool->parallel_for(static_cast<int64_t>(cells), 1024,
                       [&](int64_t b, int64_t e) { split_blocks(static_cast<size_t>(b), static_cast<size_t>(e)); });
  else
    split_blocks(0, cells);
  split_.k = 2 * blocks * bs;
  split_.n = w.n;
  split_.block_size = bs;
  split_.b = b_.data();
  split_.scale_type = Q4FloatType::kF32;
  split_.scales = scale_.data();
  split_.zero_point_type = Q4MatMulNBitsWeight::ZeroPoints::kPacked;
  split_.zero_points = zero_.data();
}

void NBits8Split::expand_rows(size_t m, size_t k, size_t bs, const float* x, size_t lda, float* out) {
  const size_t kk = split_k(k, bs);
  for (size_t r = 0; r < m; ++r) {
    const float* row = x + r * lda;
    float* o = out + r * kk;
    for (size_t k0 = 0; k0 < k; k0 += bs, o += 2 * bs) {
      const size_t len = std::min(bs, k - k0);
      std::memcpy(o, row + k0, len * sizeof(float));
      std::memset(o + len, 0, (bs - len) * sizeof(float));
      std::memcpy(o + bs, o, bs * sizeof(float));
    }
  }
}

std::vector<float> nbits8_dequantize(const Q4MatMulNBitsWeight& w) {
  check(w);
  const size_t bs = w.block_size, blocks = static_cast<size_t>(ceil_div(w.k, bs));
  std::vector<float> out(static_cast<size_t>(checked_mul(w.k, w.n, "K·N")));
  for (size_t n = 0; n < w.n; ++n)
    for (size_t k = 0; k < w.k; ++k) {
      const size_t i = n * blocks + k / bs;
      out[k * w.n + n] =
          static_cast<float>(int{w.b[i * bs + k % bs]} - zero_point(w, i)) * load_q4_float(w.scale_type, w.scales, i);
    }
  return out;
}

}  // namespace onebit
