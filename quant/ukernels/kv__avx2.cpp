// AVX2 + F16C + FMA KV microkernels.
//   vcvt: 8 lanes of vcvtph2ps / vcvtps2ph (round to nearest even), the
//         scalar element for the tail.
//   qk:   2 query rows × 4 keys per step: eight accumulators of eight lanes
//         over d, then one hadd tree gives the four keys' scores of a row
//         (the lane sum kv_ukernels.h fixes). Keys are taken in blocks of 64
//         so that, with more than 2 rows, a block stays in L1 for all of them.
//   pv:   2 rows × 32 columns of accumulators; positions in runs of 64, each
//         run's value rows read once for every row pair and column block
//         (the accumulators go back through Y between runs, which leaves each
//         element's one FMA chain as it was).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
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

namespace {

__m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
float wide(float x) { return x; }
float wide(uint16_t h) { return half_to_float(h); }

// Lane j: the sum of a_j's lanes, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
__m128 sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// R rows against keys [0, t), four at a time; a last group of fewer repeats
// its first key and stores only what it has.
template <int R, class K>
void qk_rows(size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s, size_t lds) {
  for (size_t j = 0; j < t; j += 4) {
    const size_t nk = std::min<size_t>(4, t - j);
    const K* k0 = k + j * ldk;
    const K* k1 = nk > 1 ? k0 + ldk : k0;
    const K* k2 = nk > 2 ? k0 + 2 * ldk : k0;
    const K* k3 = nk > 3 ? k0 + 3 * ldk : k0;
    __m256 acc[R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm256_setzero_ps();
    // Key by key, so the cache is read as one stream (four keys' lanes side
    // by side read the head as four, measured ~2× slower for float32).
    const K* keys[4] = {k0, k1, k2, k3};
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x)
      for (size_t i = 0; i < d; i += 8) {
        const __m256 b = load8(keys[x] + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r][x] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * ldq + i), b, acc[r][x]);
      }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m128 v = sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      if (nk == 4) {
        _mm_storeu_ps(s + r * lds + j, v);
      } else {
        alignas(16) float out[4];
        _mm_store_ps(out, v);
        for (size_t x = 0; x < nk; ++x) s[r * lds + j + x] = out[x];
      }
    }
  }
}

template <class K>
void qk(size_t m, size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s, size_t lds) {
  constexpr size_t kBlock = 64;
  for (size_t j0 = 0; j0 < t; j0 += kBlock) {
    const size_t n = std::min(kBlock, t - j0);
    for (size_t r = 0; r < m; r += 2) {
      if (m - r >= 2) qk_rows<2>(n, d, q + r * ldq, ldq, k + j0 * ldk, ldk, s + r * lds + j0, lds);
      else qk_rows<1>(n, d, q + r * ldq, ldq, k + j0 * ldk, ldk, s + r * lds + j0, lds);
    }
  }
}

// R rows × 32 columns over positions [0, n); `first`: the chains start at zero, else from Y.
template <int R, class V>
void pv_block(size_t n, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy, bool first) {
  __m256 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy + 8 * c);
  for (size_t j = 0; j < n; ++j, v += ldv) {
    const __m256 v0 = load8(v), v1 = load8(v + 8), v2 = load8(v + 16), v3 = load8(v + 24);
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

// Copies (widens) n rows of d into `out`, rows d apart, reading them in order.
void stage(size_t n, size_t d, const float* v, size_t ldv, float* out) {
  for (size_t j = 0; j < n; ++j) std::copy_n(v + j * ldv, d, out + j * d);
}
void stage(size_t n, size_t d, const uint16_t* v, size_t ldv, float* out) {
  for (size_t j = 0; j < n; ++j) f16_f32_vcvt_ukernel__avx2(d, v + j * ldv, out + j * d);
}

template <class V>
void pv(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy) {
  // Positions in runs staged as float32 in L1 first: read in order, a run's
  // rows stream from memory at the read limit, where the column blocks below
  // walking down them directly reach about half of it.
  constexpr size_t kStage = 4096;
  alignas(32) float staged[kStage];
  const size_t whole = d / 32 * 32;
  if (t == 0) {
    for (size_t r = 0; r < m; ++r) std::fill(y + r * ldy, y + r * ldy + d, 0.0f);
    return;
  }
  const size_t run = d <= kStage ? std::min<size_t>(64, kStage / d) : 0;
  const size_t step = run ? run : 64;
  for (size_t j0 = 0; j0 < t; j0 += step) {
    const size_t n = std::min(step, t - j0);
    const bool first = j0 == 0;
    if (run) stage(n, d, v + j0 * ldv, ldv, staged);
    // The next run, requested now so that it arrives while this one is computed.
    const size_t next = std::min(t, j0 + 2 * step), row_bytes = d * sizeof(V);
    for (size_t j = j0 + step; j < next; ++j)
      for (size_t b = 0; b < row_bytes; b += 64)
        _mm_prefetch(reinterpret_cast<const char*>(v + j * ldv) + b, _MM_HINT_T0);
    for (size_t r = 0; r < m; r += 2) {
      const float* pr = p + r * ldp + j0;
      float* yr = y + r * ldy;
      for (size_t c = 0; c < whole; c += 32) {
        if (run) {
          if (m - r >= 2) pv_block<2>(n, pr, ldp, staged + c, d, yr + c, ldy, first);
          else pv_block<1>(n, pr, ldp, staged + c, d, yr + c, ldy, first);
        } else {
          if (m - r >= 2) pv_block<2>(n, pr, ldp, v + j0 * ldv + c, ldv, yr + c, ldy, first);
          else pv_block<1>(n, pr, ldp, v + j0 * ldv + c, ldv, yr + c, ldy, first);
        }
      }
      for (size_t rr = r; rr < std::min(m, r + 2); ++rr)  // columns past the last block of 32
        for (size_t c = whole; c < d; ++c) {
          float acc = first ? 0.0f : y[rr * ldy + c];
          for (size_t j = j0; j < j0 + n; ++j) acc = std::fma(p[rr * ldp + j], wide(v[j * ldv + c]), acc);
          y[rr * ldy + c] = acc;
        }
    }
  }
}

}  // namespace

// A head size that is not a multiple of 8 runs the scalar kernel, which
// defines the result (no head size here is one).
void f32_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                              float* s, size_t lds) {
  if (d % 8 != 0) return f32_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  qk(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_f16_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                  size_t ldk, float* s, size_t lds) {
  if (d % 8 != 0) return f32_f16_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  qk(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v, size_t ldv,
                               float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}
void f32_f16_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                   size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}

}  // namespace onebit
