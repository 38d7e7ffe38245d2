// com.microsoft::MatMulNBits with bits = 8 (onnxruntime-genai's `-p int8`
// builds, and the 8-bit layers its mixed-precision int4 builds promote) on
// the 4-bit GEMM, by splitting each 8-bit code into its two nibbles.
//
// An 8-bit code c with zero point Z is  c − Z = 16·(h − zh) + (l − zl)  for
// h = c >> 4, l = c & 15, zh = Z >> 4, zl = Z & 15. So block b of a column
// (scale s) becomes two 4-bit blocks of the same length: 2b holds the high
// nibbles with zero point zh and scale 16·s, 2b + 1 the low nibbles with zl
// and s. The split weight has K' = 2·ceil(K/bs)·bs; its activation row is
// the input row with each block written twice (expand_rows), the short last
// block and the rest of K' zero (where the codes are the zero point, i.e.
// weight 0). Each block's two halves see the same activation values, so
// every activation precision quantizes both like the one block they came
// from, and the integer sums stay exact: the product differs from an 8-bit
// kernel's only in the order of the float steps. The split reads 1 + 9/bs
// bytes a weight (codes, two scales and two zero-point nibbles a block)
// where 8-bit blocks would read 1 + 5/bs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/q4_gemm.h"

namespace onebit {

class ThreadPool;

// The 8-bit weight is described by a Q4MatMulNBitsWeight read for bits = 8:
//   b            uint8 [N][ceil(K/bs)][bs], code k of block b of column n at (n·blocks + b)·bs + k
//   scales       [N·ceil(K/bs)] float or float16
//   zero_points  kPacked: uint8 [N·ceil(K/bs)], one byte a block; kF32 / kF16:
//                [N·ceil(K/bs)] holding integers in [0, 255]; kNone: 128
class NBits8Split {
 public:
  // Validates (block size a multiple of 8 from 16, finite scales, integral
  // zero points in [0, 255]) and builds the 4-bit weight (the codes split
  // over `pool` when given).
  explicit NBits8Split(const Q4MatMulNBitsWeight& w8, ThreadPool* pool = nullptr);

  // The split 4-bit weight (float32 scales, packed zero points); valid while this lives.
  const Q4MatMulNBitsWeight& weight() const { return split_; }
  size_t split_k() const { return split_.k; }

  // Rows x [m][k] (row stride lda) into out [m][split_k(k, bs)] as the split weight reads them.
  static size_t split_k(size_t k, size_t bs);
  static void expand_rows(size_t m, size_t k, size_t bs, const float* x, size_t lda, float* out);

 private:
  std::vector<uint8_t> b_, zero_;
  std::vector<float> scale_;
  Q4MatMulNBitsWeight split_;
};

// The weight as a float product would use it: [K][N], (c − Z)·s.
std::vector<float> nbits8_dequantize(const Q4MatMulNBitsWeight& w8);

}  // namespace onebit
