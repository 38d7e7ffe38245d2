// The reference float GEMM family: plain loops, one fmaf per multiply-add in
// K order, so every vector family can be checked against it.
#include <cmath>

#include "quant/ukernels/f32_ukernels.h"

namespace onebit {

void f32_gemm_ukernel_4x8__scalar(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                  float* c, size_t ldc, const float* bias, bool accumulate) {
  constexpr size_t MR = kF32ScalarMR, NR = kF32ScalarNR;
  float acc[MR][NR] = {};
  for (size_t r = 0; r < mr; ++r)
    for (size_t j = 0; j < nc; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : (bias ? bias[j] : 0.0f);
  for (size_t k = 0; k < kc; ++k, a += MR, b += ldb)
    for (size_t r = 0; r < mr; ++r)
      for (size_t j = 0; j < nc; ++j) acc[r][j] = std::fma(a[r], b[j], acc[r][j]);
  for (size_t r = 0; r < mr; ++r)
    for (size_t j = 0; j < nc; ++j) c[r * ldc + j] = acc[r][j];
}

void f32_gemv_ukernel_1x8__scalar(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                  const float* bias) {
  for (size_t j = 0; j < nc; ++j) {
    float acc = bias ? bias[j] : 0.0f;
    for (size_t i = 0; i < k; ++i) acc = std::fma(a[i], b[i * ldb + j], acc);
    c[j] = acc;
  }
}

void f32_dot_ukernel_4xn__scalar(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                                 size_t ldb, float* c, size_t ldc, const float* bias) {
  for (size_t r = 0; r < m; ++r)
    for (size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (size_t i = 0; i < k; ++i) acc = std::fma(a[r * lda + i], b[j * ldb + i], acc);
      c[r * ldc + j] = acc + (bias ? bias[j] : 0.0f);
    }
}

void f32_axpy_ukernel_8x__scalar(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y) {
  for (size_t j = 0; j < n; ++j) {
    float acc = y[j];
    for (size_t r = 0; r < rows; ++r) acc = std::fma(a[r], b[r * ldb + j], acc);
    y[j] = acc;
  }
}

}  // namespace onebit
