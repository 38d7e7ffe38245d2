// AVX2 + F16C + FMA: up to 4 rows × 16 columns, taken two rows at a time.
// Every row has four accumulator chains, even and odd k for each half-panel,
// so the FMA latency does not bound the decode stream through the panel,
// and a row is computed the same way whatever the number of rows (decode
// and a batched pass agree bit for bit). Per pair of k: four 16-byte loads
// of halves, four vcvtph2ps, four FMAs per row.
#include <immintrin.h>

#include "quant/ukernels/f16w_ukernels.h"

namespace onebit {

namespace {

template <int R>
void rows(size_t k, const float* a, size_t lda, const uint16_t* b, float* c, size_t ldc, size_t nc) {
  __m256 e0[R], e1[R], o0[R], o1[R];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) e0[r] = e1[r] = o0[r] = o1[r] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 2 <= k; i += 2) {
    const __m128i* p = reinterpret_cast<const __m128i*>(b + i * kF16wNR);
    _mm_prefetch(reinterpret_cast<const char*>(p) + 4096, _MM_HINT_T1);
    const __m256 be0 = _mm256_cvtph_ps(_mm_loadu_si128(p)), be1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
    const __m256 bo0 = _mm256_cvtph_ps(_mm_loadu_si128(p + 2)), bo1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 3));
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m256 xe = _mm256_broadcast_ss(a + r * lda + i), xo = _mm256_broadcast_ss(a + r * lda + i + 1);
      e0[r] = _mm256_fmadd_ps(xe, be0, e0[r]);
      e1[r] = _mm256_fmadd_ps(xe, be1, e1[r]);
      o0[r] = _mm256_fmadd_ps(xo, bo0, o0[r]);
      o1[r] = _mm256_fmadd_ps(xo, bo1, o1[r]);
    }
  }
  if (i < k) {
    const __m128i* p = reinterpret_cast<const __m128i*>(b + i * kF16wNR);
    const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128(p)), b1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + i);
      e0[r] = _mm256_fmadd_ps(x, b0, e0[r]);
      e1[r] = _mm256_fmadd_ps(x, b1, e1[r]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const __m256 lo = _mm256_add_ps(e0[r], o0[r]), hi = _mm256_add_ps(e1[r], o1[r]);
    float* cr = c + r * ldc;
    if (nc == kF16wNR) {
      _mm256_storeu_ps(cr, lo);
      _mm256_storeu_ps(cr + 8, hi);
      continue;
    }
    alignas(32) float t[kF16wNR];
    _mm256_store_ps(t, lo);
    _mm256_store_ps(t + 8, hi);
    for (size_t j = 0; j < nc; ++j) cr[j] = t[j];
  }
}

// One row against S panels that lie apart in memory, read side by side:
// per panel the same four chains in the same order as rows<1>.
template <int S>
void gemv_streams(size_t k, const float* a, const uint16_t* const* b, float* const* c, const size_t* nc) {
  __m256 e0[S], e1[S], o0[S], o1[S];
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s) e0[s] = e1[s] = o0[s] = o1[s] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 2 <= k; i += 2) {
    const __m256 xe = _mm256_broadcast_ss(a + i), xo = _mm256_broadcast_ss(a + i + 1);
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      const __m128i* p = reinterpret_cast<const __m128i*>(b[s] + i * kF16wNR);
      _mm_prefetch(reinterpret_cast<const char*>(p) + 2048, _MM_HINT_T1);
      e0[s] = _mm256_fmadd_ps(xe, _mm256_cvtph_ps(_mm_loadu_si128(p)), e0[s]);
      e1[s] = _mm256_fmadd_ps(xe, _mm256_cvtph_ps(_mm_loadu_si128(p + 1)), e1[s]);
      o0[s] = _mm256_fmadd_ps(xo, _mm256_cvtph_ps(_mm_loadu_si128(p + 2)), o0[s]);
      o1[s] = _mm256_fmadd_ps(xo, _mm256_cvtph_ps(_mm_loadu_si128(p + 3)), o1[s]);
    }
  }
  if (i < k) {
    const __m256 x = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      const __m128i* p = reinterpret_cast<const __m128i*>(b[s] + i * kF16wNR);
      e0[s] = _mm256_fmadd_ps(x, _mm256_cvtph_ps(_mm_loadu_si128(p)), e0[s]);
      e1[s] = _mm256_fmadd_ps(x, _mm256_cvtph_ps(_mm_loadu_si128(p + 1)), e1[s]);
    }
  }
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s) {
    const __m256 lo = _mm256_add_ps(e0[s], o0[s]), hi = _mm256_add_ps(e1[s], o1[s]);
    if (nc[s] == kF16wNR) {
      _mm256_storeu_ps(c[s], lo);
      _mm256_storeu_ps(c[s] + 8, hi);
      continue;
    }
    alignas(32) float t[kF16wNR];
    _mm256_store_ps(t, lo);
    _mm256_store_ps(t + 8, hi);
    for (size_t j = 0; j < nc[s]; ++j) c[s][j] = t[j];
  }
}

}  // namespace

void f32_f16w_gemv_streams_ukernel_1x16s2__avx2(size_t streams, size_t k, const float* a, const uint16_t* const* b,
                                        float* const* c, const size_t* nc) {
  size_t s = 0;
  for (; s + 2 <= streams; s += 2) gemv_streams<2>(k, a, b + s, c + s, nc + s);
  if (s < streams) gemv_streams<1>(k, a, b + s, c + s, nc + s);
}

void f32_f16w_gemm_ukernel_4x16__avx2(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                      size_t ldc, size_t nc) {
  size_t r = 0;
  for (; r + 2 <= m; r += 2) rows<2>(k, a + r * lda, lda, b, c + r * ldc, ldc, nc);
  if (r < m) rows<1>(k, a + r * lda, lda, b, c + r * ldc, ldc, nc);
}

}  // namespace onebit
