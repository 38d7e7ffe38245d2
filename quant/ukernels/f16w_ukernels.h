// Float GEMM microkernels over float16 weights (float32 activations and
// accumulators): the weights stay half-size in memory and are widened in
// registers, so a decode step reads 2 bytes per weight. Named as the other
// families (f32_f16w_gemm_ukernel_<MR>x<NR>__<isa>); the __scalar one is the
// reference. Only kernel_config.cpp refers to these names; ops/f16w_matmul.cpp
// drives them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

// One packed panel of float16 weights: k rows of kF16wNR halves. kF16wMR:
// the rows of the decode tile; kF16wWideMR: of the prompt tile (AVX-512),
// which computes every output bit for bit as the decode tile does.
inline constexpr size_t kF16wNR = 16, kF16wMR = 4, kF16wWideMR = 12;

// C[m×nc] = A[m×k] · B, B one panel [k][16] of float16 bits, m <= kF16wMR,
// nc <= 16 columns stored; A rows lda apart, C rows ldc apart.
using F32F16wGemmUkernel = void (*)(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                    size_t ldc, size_t nc);

void f32_f16w_gemm_ukernel_4x16__scalar(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                        size_t ldc, size_t nc);
void f32_f16w_gemm_ukernel_4x16__avx2(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                      size_t ldc, size_t nc);
// m <= kF16wWideMR.
void f32_f16w_gemm_ukernel_12x16__avx512(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                         size_t ldc, size_t nc);

// One row (a decode step) against `streams` panels b[s] (at most the
// family's stream count, at most kF16wStreams), each into c[s] (nc[s] <= 16
// columns): panels far apart in memory read side by side, so a thread keeps
// several streams in flight. Each output is the same sum as the gemm tile's
// for one row, bit for bit.
inline constexpr size_t kF16wStreams = 4;
using F32F16wGemvUkernel = void (*)(size_t streams, size_t k, const float* a, const uint16_t* const* b,
                                    float* const* c, const size_t* nc);

void f32_f16w_gemv_streams_ukernel_1x16s2__avx2(size_t streams, size_t k, const float* a, const uint16_t* const* b,
                                        float* const* c, const size_t* nc);
void f32_f16w_gemv_streams_ukernel_1x16s4__avx512(size_t streams, size_t k, const float* a, const uint16_t* const* b,
                                          float* const* c, const size_t* nc);
// The same, each stream prefetched 1 KiB ahead instead of 2 (faster on
// Zen 4: kernel_config.cpp picks by vendor and generation). Same results.
void f32_f16w_gemv_streams_ukernel_1x16s4__avx512_l2near(size_t streams, size_t k, const float* a,
                                                         const uint16_t* const* b, float* const* c, const size_t* nc);

}  // namespace onebit
