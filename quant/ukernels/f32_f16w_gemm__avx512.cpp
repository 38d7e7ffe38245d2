// AVX-512 + F16C: up to 12 rows × 16 columns, the prompt-sized tile of the
// float16-weight family. Each row keeps the AVX2 kernel's two chains per
// column — even k and odd k, added at the end — so every output is the same
// sum in the same order as f32_f16w_gemm_ukernel_4x16__avx2 computes it, bit
// for bit: a row does not depend on which kernel or how many rows ran it. Per
// pair of k: two 32-byte loads of halves and two vcvtph2ps for all 12 rows
// (the AVX2 tile widens the panel again every 2 rows), 2 FMAs per row.
#include <immintrin.h>

#include "quant/ukernels/f16w_ukernels.h"

namespace onebit {

namespace {

inline __m512 widen16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <int R>
void tile(size_t k, const float* a, size_t lda, const uint16_t* b, float* c, size_t ldc, size_t nc) {
  __m512 e[R], o[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) e[r] = o[r] = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 2 <= k; i += 2) {
    const uint16_t* p = b + i * kF16wNR;
    // Decode streams the panel from memory: into L2, 8 KiB ahead; a
    // prompt's tile is bound by its FMAs.
    if (R <= static_cast<int>(kF16wMR)) _mm_prefetch(reinterpret_cast<const char*>(p) + 8192, _MM_HINT_T1);
    else _mm_prefetch(reinterpret_cast<const char*>(p + 16 * kF16wNR), _MM_HINT_T0);
    const __m512 be = widen16(p), bo = widen16(p + kF16wNR);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      e[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + i]), be, e[r]);
      o[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + i + 1]), bo, o[r]);
    }
  }
  if (i < k) {
    const __m512 be = widen16(b + i * kF16wNR);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) e[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + i]), be, e[r]);
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << nc) - 1);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(c + r * ldc, mask, _mm512_add_ps(e[r], o[r]));
}

// One row against up to kF16wStreams panels that lie apart in memory, read
// side by side: each panel a stream of its own for the prefetchers, its
// columns summed by the same two chains in the same order as tile<1>. Each
// stream prefetched PF bytes ahead into L2: 2 KiB (tuned on a Xeon), or 1
// KiB (_l2near: 9-12 % faster a one-thread step on a Zen 4 VM than 2 KiB,
// docs/BENCHMARK.md "The float16 decode prefetch on Zen 4").
template <int S, int PF>
void streams(size_t k, const float* a, const uint16_t* const* b, float* const* c, const size_t* nc) {
  __m512 e[S], o[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) e[s] = o[s] = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 2 <= k; i += 2) {
    const __m512 ae = _mm512_set1_ps(a[i]), ao = _mm512_set1_ps(a[i + 1]);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const uint16_t* p = b[s] + i * kF16wNR;
      _mm_prefetch(reinterpret_cast<const char*>(p) + PF, _MM_HINT_T1);
      e[s] = _mm512_fmadd_ps(ae, widen16(p), e[s]);
      o[s] = _mm512_fmadd_ps(ao, widen16(p + kF16wNR), o[s]);
    }
  }
  if (i < k) {
    const __m512 ae = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) e[s] = _mm512_fmadd_ps(ae, widen16(b[s] + i * kF16wNR), e[s]);
  }
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s)
    _mm512_mask_storeu_ps(c[s], static_cast<__mmask16>((1u << nc[s]) - 1), _mm512_add_ps(e[s], o[s]));
}

using Streams = void (*)(size_t, const float*, const uint16_t* const*, float* const*, const size_t*);
template <int PF>
constexpr Streams kStreams[kF16wStreams + 1] = {nullptr, streams<1, PF>, streams<2, PF>, streams<3, PF>,
                                                streams<4, PF>};
static_assert(kF16wStreams == 4, "kStreams lists one instantiation per stream count");

template <int PF>
void gemv_streams(size_t streams, size_t k, const float* a, const uint16_t* const* b, float* const* c,
                  const size_t* nc) {
  // More streams than the kernel reads at once (callers send at most
  // kF16wStreams): the rest in further passes, every output still written.
  for (size_t s = 0; s < streams; s += kF16wStreams) {
    const size_t now = streams - s < kF16wStreams ? streams - s : kF16wStreams;
    kStreams<PF>[now](k, a, b + s, c + s, nc + s);
  }
}

using Tile = void (*)(size_t, const float*, size_t, const uint16_t*, float*, size_t, size_t);
constexpr Tile kTiles[kF16wWideMR + 1] = {nullptr,   tile<1>,  tile<2>,  tile<3>, tile<4>,  tile<5>, tile<6>,
                                          tile<7>,   tile<8>,  tile<9>,  tile<10>, tile<11>, tile<12>};
static_assert(kF16wWideMR == 12, "kTiles lists one instantiation per row count");

}  // namespace

void f32_f16w_gemm_ukernel_12x16__avx512(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                         size_t ldc, size_t nc) {
  if (m > 0) kTiles[m](k, a, lda, b, c, ldc, nc);
}

void f32_f16w_gemv_streams_ukernel_1x16s4__avx512(size_t streams, size_t k, const float* a, const uint16_t* const* b,
                                          float* const* c, const size_t* nc) {
  gemv_streams<2048>(streams, k, a, b, c, nc);
}

void f32_f16w_gemv_streams_ukernel_1x16s4__avx512_l2near(size_t streams, size_t k, const float* a,
                                                         const uint16_t* const* b, float* const* c, const size_t* nc) {
  gemv_streams<1024>(streams, k, a, b, c, nc);
}

}  // namespace onebit
