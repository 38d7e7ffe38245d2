// NumPy matmul geometry, shared by MatMul, Gemm and MatMulInteger (ONNX MatMul-13,
// "Matrix product that behaves like numpy.matmul"): a 1-D A is a row [1,K]
// and a 1-D B a column [K,1], the promoted dim is dropped from the output,
// and the dims before the last two broadcast.
//
// Kept free of heap allocation after matmul_shape() so run() can recompute it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "graph/tensor.h"
#include "ops/dispatch.h"

namespace onebit {

struct MatMulShape {
  static constexpr int kMaxBatchRank = 8;
  int64_t m = 1, k = 1, n = 1;
  int64_t batch = 1;                  // product of the output batch dims
  int rank = 0;                       // number of output batch dims
  int64_t dims[kMaxBatchRank] = {};   // output batch dims
  int64_t a_step[kMaxBatchRank] = {}; // elements of A per step along each batch dim (0: broadcast)
  int64_t b_step[kMaxBatchRank] = {};
  bool a_vector = false, b_vector = false;
  bool b_shared = false;              // B has no batch dims: one [K,N] matrix for every batch
  int64_t a_batches = 1, b_batches = 1;  // batch counts of A and B themselves

  // Element offset of output batch `o`'s matrix in A, in B.
  int64_t a_offset(int64_t o) const { return offset(o, a_step); }
  int64_t b_offset(int64_t o) const { return offset(o, b_step); }
  Shape output_shape() const;

 private:
  int64_t offset(int64_t o, const int64_t* step) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (o % dims[d]) * step[d];
      o /= dims[d];
    }
    return off;
  }
};

// Throws an Error naming both shapes when K or the batch dims disagree.
MatMulShape matmul_shape(const Shape& a, const Shape& b);

// The element types of MatMul-13 and Gemm-13 (float16/32/64, bfloat16,
// int32/64, uint32/64).
bool matmul_dtype(DType t);

// Accumulation for the plain (non-float32) loops: 16-bit floats in float,
// double in double, integers in their unsigned twin so overflow wraps like
// two's complement instead of being undefined.
template <class T, bool = std::is_integral_v<T>>
struct DotArith {
  using Acc = typename Arith<T>::C;
  static Acc load(T v) { return Arith<T>::load(v); }
  static T store(Acc v) { return Arith<T>::store(v); }
};
template <class T>
struct DotArith<T, true> {
  using Acc = std::make_unsigned_t<T>;
  static Acc load(T v) { return static_cast<Acc>(v); }
  static T store(Acc v) { return static_cast<T>(v); }
};

}  // namespace onebit
