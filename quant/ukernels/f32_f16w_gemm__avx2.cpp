// AVX2 + F16C + FMA: 4 rows × 16 columns; per k one 32-byte load of halves,
// two vcvtph2ps, and one FMA per row and half-panel. Decode (m = 1) is a
// linear stream through the panel.
#include <immintrin.h>

#include "quant/ukernels/f16w_ukernels.h"

namespace onebit {

namespace {

// One row (decode): four accumulator chains, k in pairs, so the FMA latency
// does not bound the stream through the panel.
void row1(size_t k, const float* a, const uint16_t* b, float* c, size_t nc) {
  __m256 e0 = _mm256_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
  size_t i = 0;
  for (; i + 2 <= k; i += 2) {
    const __m128i* p = reinterpret_cast<const __m128i*>(b + i * kF16wNR);
    _mm_prefetch(reinterpret_cast<const char*>(p + 16), _MM_HINT_T0);
    const __m256 xe = _mm256_broadcast_ss(a + i), xo = _mm256_broadcast_ss(a + i + 1);
    e0 = _mm256_fmadd_ps(xe, _mm256_cvtph_ps(_mm_loadu_si128(p)), e0);
    e1 = _mm256_fmadd_ps(xe, _mm256_cvtph_ps(_mm_loadu_si128(p + 1)), e1);
    o0 = _mm256_fmadd_ps(xo, _mm256_cvtph_ps(_mm_loadu_si128(p + 2)), o0);
    o1 = _mm256_fmadd_ps(xo, _mm256_cvtph_ps(_mm_loadu_si128(p + 3)), o1);
  }
  if (i < k) {
    const __m128i* p = reinterpret_cast<const __m128i*>(b + i * kF16wNR);
    const __m256 x = _mm256_broadcast_ss(a + i);
    e0 = _mm256_fmadd_ps(x, _mm256_cvtph_ps(_mm_loadu_si128(p)), e0);
    e1 = _mm256_fmadd_ps(x, _mm256_cvtph_ps(_mm_loadu_si128(p + 1)), e1);
  }
  const __m256 lo = _mm256_add_ps(e0, o0), hi = _mm256_add_ps(e1, o1);
  if (nc == kF16wNR) {
    _mm256_storeu_ps(c, lo);
    _mm256_storeu_ps(c + 8, hi);
    return;
  }
  alignas(32) float t[kF16wNR];
  _mm256_store_ps(t, lo);
  _mm256_store_ps(t + 8, hi);
  for (size_t j = 0; j < nc; ++j) c[j] = t[j];
}

}  // namespace

void f32_f16w_gemm_ukernel_4x16__avx2(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                      size_t ldc, size_t nc) {
  if (m == 1) return row1(k, a, b, c, nc);
  __m256 acc[kF16wMR][2];
  for (size_t r = 0; r < kF16wMR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (size_t i = 0; i < k; ++i) {
    const __m128i* p = reinterpret_cast<const __m128i*>(b + i * kF16wNR);
    const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128(p)), b1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
    for (size_t r = 0; r < m; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + i);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  for (size_t r = 0; r < m; ++r) {
    if (nc == kF16wNR) {
      _mm256_storeu_ps(c + r * ldc, acc[r][0]);
      _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    } else {
      alignas(32) float t[kF16wNR];
      _mm256_store_ps(t, acc[r][0]);
      _mm256_store_ps(t + 8, acc[r][1]);
      for (size_t j = 0; j < nc; ++j) c[r * ldc + j] = t[j];
    }
  }
}

}  // namespace onebit
