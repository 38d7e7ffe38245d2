// AVX2 + F16C + FMA KV microkernels.
//   vcvt: 8 lanes of vcvtph2ps / vcvtps2ph (round to nearest even), the
//         scalar element for the tail.
//   qk:   kv_qk.h with row blocks of 2 (16 ymm registers).
//   pv:   2 rows × 32 columns of accumulators; positions in runs of 64, each
//         run's value rows read from memory once for every row pair and
//         column block (the accumulators go back through Y between runs,
//         which leaves each element's one FMA chain as it was).
#include <immintrin.h>

#include <algorithm>

#include "base/dtype.h"
#include "quant/ukernels/kv_qk.h"
#include "quant/ukernels/kv_ukernels.h"

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

void f32_f16_vscaleadd_ukernel__avx2(size_t n, float* y, float scale, const uint16_t* mask) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const auto h = [](__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, kRound)); };
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mask + i)));
    _mm256_storeu_ps(y + i, h(_mm256_add_ps(h(_mm256_mul_ps(h(_mm256_loadu_ps(y + i)), s)), m)));
  }
  if (i < n) f32_f16_vscaleadd_ukernel__scalar(n - i, y + i, scale, mask + i);
}

namespace {

// The reference kernel for the columns past the last block of 32: the same
// one chain per element.
void pv_tail(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v, size_t ldv, float* y,
             size_t ldy) {
  f32_pv_ukernel_2x32__scalar(m, t, d, p, ldp, v, ldv, y, ldy);
}
void pv_tail(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v, size_t ldv, float* y,
             size_t ldy) {
  f32_f16_pv_ukernel_2x32__scalar(m, t, d, p, ldp, v, ldv, y, ldy);
}
void pv_tail(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v, size_t ldv, float* y,
             size_t ldy, const float* sc) {
  f32_q8_pv_ukernel_2x32__scalar(m, t, d, p, ldp, v, ldv, sc, y, ldy);
}
template <class V>
void pv_tail(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
             const float*) {
  pv_tail(m, t, d, p, ldp, v, ldv, y, ldy);
}

// R rows × 32 columns over positions [0, n); `first`: the chains start at zero, else from Y.
// sc: int8 values' scales for these positions (null otherwise).
template <int R, class V>
void pv_block(size_t n, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy, bool first,
              const float* sc) {
  __m256 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy + 8 * c);
  for (size_t j = 0; j < n; ++j, v += ldv) {
    const __m256 vs = sc ? _mm256_set1_ps(sc[j]) : _mm256_setzero_ps();
    const __m256 v0 = load8(v, vs), v1 = load8(v + 8, vs), v2 = load8(v + 16, vs), v3 = load8(v + 24, vs);
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
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) _mm256_storeu_ps(y + r * ldy + 8 * c, acc[r][c]);
}

template <class V>
void pv(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
        const float* sc = nullptr) {
  // Positions in runs of 64: a run's rows stay in L1 while every row pair and
  // column block goes over them. (Staging a run as float32 first, or
  // prefetching the next one, measured slower.)
  constexpr size_t kRun = 64;
  const size_t whole = d / 32 * 32;
  if (t == 0) return pv_tail(m, t, d, p, ldp, v, ldv, y, ldy, sc);  // zeros
  for (size_t j0 = 0; j0 < t; j0 += kRun) {
    const size_t n = std::min(kRun, t - j0);
    const bool first = j0 == 0;
    const float* scj = sc ? sc + j0 : nullptr;
    for (size_t r = 0; r < m; r += 2) {
      const float* pr = p + r * ldp + j0;
      float* yr = y + r * ldy;
      for (size_t c = 0; c < whole; c += 32) {
        if (m - r >= 2) pv_block<2>(n, pr, ldp, v + j0 * ldv + c, ldv, yr + c, ldy, first, scj);
        else pv_block<1>(n, pr, ldp, v + j0 * ldv + c, ldv, yr + c, ldy, first, scj);
      }
    }
  }
  if (whole < d) pv_tail(m, t, d - whole, p, ldp, v + whole, ldv, y + whole, ldy, sc);
}

}  // namespace

// A head size that is not a multiple of 8 runs the scalar kernel, which
// defines the result (no head size here is one).
void f32_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                              float* s, size_t lds) {
  if (d % 8 != 0) return f32_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  kv_qk<2, 0>(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_f16_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                  size_t ldk, float* s, size_t lds) {
  if (d % 8 != 0) return f32_f16_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  kv_qk<2, 0>(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v, size_t ldv,
                               float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}
void f32_f16_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                   size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}

void f32_q8_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                 size_t ldk, const float* scales, float* s, size_t lds) {
  if (d % 8 != 0) return f32_q8_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, scales, s, lds);
  kv_qk<2, 0>(m, t, d, q, ldq, k, ldk, s, lds, scales);
}
void f32_q8_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                  size_t ldv, const float* scales, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy, scales);
}

}  // namespace onebit
