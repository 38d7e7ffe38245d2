// Float GEMM microkernels, named <dtypes>_<op>_ukernel_<MR>x<NR>__<isa> after
// XNNPACK. Each ISA lives in its own file compiled with that ISA's flags
// (f32_gemm__avx2.cpp, f32_gemm__avx512.cpp); the __scalar family is the
// reference the others are tested against. Signatures are F32GemmUkernel and
// F32GemvUkernel in ops/sgemm.h; only sgemm_config.cpp refers to these names.
#pragma once

#include <cstddef>

namespace onebit {

// Tile shapes, shared by the kernels and the config that packs for them.
inline constexpr size_t kF32ScalarMR = 4, kF32ScalarNR = 8;
inline constexpr size_t kF32Avx2MR = 6, kF32Avx2NR = 16;
inline constexpr size_t kF32Avx512MR = 12, kF32Avx512NR = 32;

// Rows of A against rows of B (C = A·Bᵀ) for at most kF32DotMaxRows rows of A,
// reading both in place: attention's Q·Kᵀ in decode, where packing Kᵀ would
// cost more than the product.
inline constexpr size_t kF32DotMaxRows = 4;

void f32_gemm_ukernel_4x8__scalar(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                  float* c, size_t ldc, const float* bias, bool accumulate);
void f32_gemv_ukernel_1x8__scalar(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                  const float* bias);

void f32_dot_ukernel_4xn__scalar(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                                 size_t ldb, float* c, size_t ldc, const float* bias);

void f32_gemm_ukernel_6x16__avx2(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                 float* c, size_t ldc, const float* bias, bool accumulate);
void f32_gemv_ukernel_1x16__avx2(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                 const float* bias);

void f32_dot_ukernel_4xn__avx2(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
                               float* c, size_t ldc, const float* bias);

void f32_gemm_ukernel_12x32__avx512(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                    float* c, size_t ldc, const float* bias, bool accumulate);
void f32_gemv_ukernel_1x32__avx512(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                   const float* bias);
void f32_dot_ukernel_4xn__avx512(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                                 size_t ldb, float* c, size_t ldc, const float* bias);

}  // namespace onebit
