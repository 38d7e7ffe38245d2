// AVX2 + F16C + FMA float16 KV microkernels. The conversions run 8 lanes of
// vcvtph2ps / vcvtps2ph (round to nearest even) with the scalar element for
// the tail; pv keeps up to 4 rows × 32 columns of accumulators and, per
// position, widens one 64-byte run of a value row once for all the rows.
#include <immintrin.h>

#include <cmath>

#include "base/dtype.h"
#include "quant/ukernels/f16_kv_ukernels.h"

namespace onebit {

void f16_f32_vcvt_ukernel__avx2(size_t n, const uint16_t* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = half_to_float(x[i]);
}

void f32_f16_vcvt_ukernel__avx2(size_t n, const float* x, uint16_t* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = float_to_half(x[i]);
}

namespace {

// R rows × 32 columns starting at column c.
template <int R>
void pv_block(size_t t, const float* p, size_t ldp, const uint16_t* v, size_t ldv, float* y, size_t ldy) {
  __m256 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm256_setzero_ps();
  for (size_t j = 0; j < t; ++j, v += ldv) {
    const __m128i* q = reinterpret_cast<const __m128i*>(v);
    _mm_prefetch(reinterpret_cast<const char*>(v + 8 * ldv), _MM_HINT_T0);
    const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128(q)), v1 = _mm256_cvtph_ps(_mm_loadu_si128(q + 1));
    const __m256 v2 = _mm256_cvtph_ps(_mm_loadu_si128(q + 2)), v3 = _mm256_cvtph_ps(_mm_loadu_si128(q + 3));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(p + r * ldp + j);
      acc[r][0] = _mm256_fmadd_ps(x, v0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, v1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(x, v2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(x, v3, acc[r][3]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) _mm256_storeu_ps(y + r * ldy + 8 * q, acc[r][q]);
}

// The columns past the last whole block of 32: the same chain per element.
void pv_tail(size_t m, size_t t, size_t c0, size_t d, const float* p, size_t ldp, const uint16_t* v, size_t ldv,
             float* y, size_t ldy) {
  for (size_t r = 0; r < m; ++r)
    for (size_t c = c0; c < d; ++c) {
      float acc = 0.0f;
      for (size_t j = 0; j < t; ++j) acc = std::fma(p[r * ldp + j], half_to_float(v[j * ldv + c]), acc);
      y[r * ldy + c] = acc;
    }
}

}  // namespace

void f32_f16_pv_ukernel_4x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                   size_t ldv, float* y, size_t ldy) {
  const size_t whole = d / 32 * 32;
  for (size_t r = 0; r < m; r += 4) {
    const size_t rows = m - r < 4 ? m - r : 4;
    const float* pr = p + r * ldp;
    float* yr = y + r * ldy;
    for (size_t c = 0; c < whole; c += 32) switch (rows) {
        case 1: pv_block<1>(t, pr, ldp, v + c, ldv, yr + c, ldy); break;
        case 2: pv_block<2>(t, pr, ldp, v + c, ldv, yr + c, ldy); break;
        case 3: pv_block<3>(t, pr, ldp, v + c, ldv, yr + c, ldy); break;
        default: pv_block<4>(t, pr, ldp, v + c, ldv, yr + c, ldy); break;
      }
    if (whole < d) pv_tail(rows, t, whole, d, pr, ldp, v, ldv, yr, ldy);
  }
}

}  // namespace onebit
