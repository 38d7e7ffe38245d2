// Float GEMM microkernels, named <dtypes>_<op>_ukernel_<MR>x<NR>__<isa> after
// XNNPACK. Each ISA lives in its own file compiled with that ISA's flags
// (f32_gemm__avx2.cpp, f32_gemm__avx512.cpp); the __scalar family is the
// reference the others are tested against. Only kernel_config.cpp refers to these names;
// ops/sgemm.cpp drives them.
#pragma once

#include <cstddef>

namespace onebit {

// C[mr×nc] = A·B + bias, or C += A·B when `accumulate` (K blocks after the first).
//   a:    packed micro-panel: kc steps of MR floats (rows mr..MR-1 are padding)
//   b:    kc rows of at least nc readable floats, row stride ldb (packed panels: ldb = NR)
//   c:    mr rows of nc floats, row stride ldc
//   bias: nc floats or null (ignored when accumulating)
using F32GemmUkernel = void (*)(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb, float* c,
                                size_t ldc, const float* bias, bool accumulate);
// c[nc] = a[k] · B[k×nc] + bias: one output row over one panel (nc <= NR).
using F32GemvUkernel = void (*)(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                const float* bias);

// C[m×n] = A·Bᵀ + bias for m <= kF32DotMaxRows: A is m×k (row stride lda), B
// n×k (row stride ldb), both read in place.
using F32DotUkernel = void (*)(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
                               float* c, size_t ldc, const float* bias);

// y[0:n] = Σ over rows r < `rows` (1 to kF32AxpyRows) of a[r]·B[r][0:n], added
// to y row by row: each element is fma(a[rows−1], ·, … fma(a[0], ·, y)).
// B rows are ldb floats apart, read in place. Decode over a weight kept in
// its [K,N] layout (ops/sgemm.h sgemm_weight) walks K in steps of
// kF32AxpyRows with y starting at the bias: every output the same FMA
// chain, k in order, as the GEMV and tile kernels compute it.
using F32AxpyUkernel = void (*)(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y);
inline constexpr size_t kF32AxpyRows = 8;

// Tile shapes, shared by the kernels and the config that packs for them.
inline constexpr size_t kF32ScalarMR = 4, kF32ScalarNR = 8;
inline constexpr size_t kF32Avx2MR = 6, kF32Avx2NR = 16;
inline constexpr size_t kF32Avx512MR = 12, kF32Avx512NR = 32;

// Rows of A against rows of B (C = A·Bᵀ) for at most kF32DotMaxRows rows of A,
// reading both in place: attention's Q·Kᵀ, where packing Kᵀ would cost more
// than the product in decode. Each row's sums are the same whatever the
// number of rows in the call.
inline constexpr size_t kF32DotMaxRows = 4;

void f32_gemm_ukernel_4x8__scalar(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                  float* c, size_t ldc, const float* bias, bool accumulate);
void f32_gemv_ukernel_1x8__scalar(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                  const float* bias);

void f32_dot_ukernel_4xn__scalar(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                                 size_t ldb, float* c, size_t ldc, const float* bias);
void f32_axpy_ukernel_8x__scalar(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y);

void f32_gemm_ukernel_6x16__avx2(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                 float* c, size_t ldc, const float* bias, bool accumulate);
void f32_gemv_ukernel_1x16__avx2(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                 const float* bias);

void f32_dot_ukernel_4xn__avx2(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
                               float* c, size_t ldc, const float* bias);
void f32_axpy_ukernel_8x__avx2(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y);

void f32_gemm_ukernel_12x32__avx512(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                    float* c, size_t ldc, const float* bias, bool accumulate);
void f32_gemv_ukernel_1x32__avx512(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                   const float* bias);
void f32_dot_ukernel_4xn__avx512(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                                 size_t ldb, float* c, size_t ldc, const float* bias);
void f32_axpy_ukernel_8x__avx512(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y);

}  // namespace onebit
