// AVX-512 KV kernels. Q·Kᵀ: kv_qk.h in row blocks of 4 for a prompt; a
// decode's one or two rows (qk_pairs below) take two keys per 512-bit
// register, each key in its own 256-bit half, so every lane keeps the chain
// kv_qk.h's 256-bit code gives it (half the widening and FMA instructions
// per key: an int8 or float16 cache's scores were bound by them, not by the
// read), the stream prefetched kQkAhead bytes ahead. P·V: R rows × B
// blocks of 16 columns of accumulators (two rows × 128 columns, or up to
// four rows × 64 for heads of 64 or less: at most 16 zmm), so a value row
// is read once, in order, for all R rows (prefetched kPvAhead bytes ahead),
// and R·B independent FMA chains hide the FMA latency; a head's last
// columns are one narrower block, its last lanes masked. Each element is
// one FMA chain over the positions from zero, as kv_ukernels.h fixes (the
// AVX2 and scalar kernels, and the float GEMM, compute the same), however
// rows and columns are blocked.
#include "quant/ukernels/simd_avx512.h"

#include <algorithm>
#include <type_traits>

#include "base/dtype.h"

#include "quant/ukernels/kv_qk.h"
#include "quant/ukernels/kv_ukernels.h"

namespace onebit {

namespace {

// Software prefetch distance of a decode's cache stream, in bytes: the
// hardware prefetcher alone left an int8 cache read from DRAM at a quarter
// of a plain read (docs/BENCHMARK.md, "Prefetching the KV stream").
constexpr size_t kQkAhead = 4096;
constexpr size_t kPvAhead = 2048;

__m512 load16(const float* p, __mmask16 m, __m512) { return _mm512_maskz_loadu_ps(m, p); }
__m512 load16(const uint16_t* p, __mmask16 m, __m512) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const __m256i*>(p)));
}
// int8 codes: scale · code (q8_value); masked-off lanes load 0.
__m512 load16(const int8_t* p, __mmask16 m, __m512 scale) {
  const __m128i c = _mm_maskz_loadu_epi8(m, reinterpret_cast<const __m128i*>(p));
  return _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)));
}

// Keys a and b side by side, elements i … i+7 of each: a in lanes 0-7, b in
// lanes 8-15, widened as kv_qk.h's load8 widens them (int8: scale · code,
// the two keys' scales in their halves).
__m512 load_pair(const float* a, const float* b, __m512) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
}
__m512 load_pair(const uint16_t* a, const uint16_t* b, __m512) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}
__m512 load_pair(const int8_t* a, const int8_t* b, __m512 scales) {
  const __m128i c = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                       _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
  return _mm512_mul_ps(scales, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)));
}

// A decode's scores: R (1 or 2) rows against keys [0, t), four at a time
// as two pairs; every score the same float operations as kv_qk.h's
// qk_rows: eight lane chains over d in i order from zero (each half of a
// register is one key's eight lanes), then sum4. A last group of fewer
// than four repeats its first key and stores what it has. d a multiple of 8.
template <int R, class K>
void qk_pairs(size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s, size_t lds,
              const float* sc) {
  for (size_t j = 0; j < t; j += 4) {
    const size_t nk = std::min<size_t>(4, t - j);
    const size_t at[4] = {j, j + (nk > 1), j + 2 * (nk > 2), j + 3 * (nk > 3)};
    const K* keys[4] = {k + at[0] * ldk, k + at[1] * ldk, k + at[2] * ldk, k + at[3] * ldk};
    {
      const char* ahead = reinterpret_cast<const char*>(k + j * ldk) + kQkAhead;
      for (size_t off = 0; off < 4 * ldk * sizeof(K); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
      if (sc) _mm_prefetch(reinterpret_cast<const char*>(sc + j) + 256, _MM_HINT_T0);
    }
    __m512 ks[2];
    for (int x = 0; x < 2; ++x)
      ks[x] = sc ? _mm512_insertf32x8(_mm512_set1_ps(sc[at[2 * x]]), _mm256_set1_ps(sc[at[2 * x + 1]]), 1)
                 : _mm512_setzero_ps();
    __m512 acc[R][2];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    size_t i = 0;
    if constexpr (std::is_same_v<K, int8_t>) {
      // Sixteen codes of each key a load, split into two steps' pairs.
      for (; i + 16 <= d; i += 16) {
        const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys[0] + i));
        const __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys[1] + i));
        const __m128i c2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys[2] + i));
        const __m128i c3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys[3] + i));
        const __m512 b0 = _mm512_mul_ps(ks[0], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(c0, c1))));
        const __m512 b1 = _mm512_mul_ps(ks[1], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(c2, c3))));
        const __m512 b2 = _mm512_mul_ps(ks[0], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpackhi_epi64(c0, c1))));
        const __m512 b3 = _mm512_mul_ps(ks[1], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpackhi_epi64(c2, c3))));
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          const __m512 a0 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + r * ldq + i));
          const __m512 a1 = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + r * ldq + i + 8));
          acc[r][0] = _mm512_fmadd_ps(a0, b0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(a0, b1, acc[r][1]);
          acc[r][0] = _mm512_fmadd_ps(a1, b2, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(a1, b3, acc[r][1]);
        }
      }
    }
    for (; i < d; i += 8) {
      const __m512 b0 = load_pair(keys[0] + i, keys[1] + i, ks[0]);
      const __m512 b1 = load_pair(keys[2] + i, keys[3] + i, ks[1]);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + r * ldq + i));
        acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      store_scores(s + r * lds + j, nk,
                   sum4(_mm512_castps512_ps256(acc[r][0]), _mm512_extractf32x8_ps(acc[r][0], 1),
                        _mm512_castps512_ps256(acc[r][1]), _mm512_extractf32x8_ps(acc[r][1], 1)));
    }
  }
}

// Q·Kᵀ: a decode's rows on qk_pairs, a prompt's on kv_qk.h in row blocks of 4.
template <class K>
void qk(size_t m, size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s, size_t lds,
        const float* sc = nullptr) {
  if (m == 1) return qk_pairs<1>(t, d, q, ldq, k, ldk, s, lds, sc);
  if (m == 2) return qk_pairs<2>(t, d, q, ldq, k, ldk, s, lds, sc);
  kv_qk<4, kQkAhead>(m, t, d, q, ldq, k, ldk, s, lds, sc);
}

// R rows × B blocks of 16 columns (the last one `tail` lanes wide); sc: int8
// values' scales (null otherwise).
template <int R, int B, class V>
void block(size_t t, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy, __mmask16 tail,
           const float* sc) {
  __m512 acc[R][B];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  for (size_t j = 0; j < t; ++j, v += ldv) {
    const char* ahead = reinterpret_cast<const char*>(v) + kPvAhead;
#pragma GCC unroll 8
    for (size_t off = 0; off < B * 16 * sizeof(V); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    if (sc) _mm_prefetch(reinterpret_cast<const char*>(sc + j) + 256, _MM_HINT_T0);
    __m512 x[B];
    const __m512 vs = sc ? _mm512_set1_ps(sc[j]) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) x[b] = load16(v + 16 * b, b == B - 1 ? tail : __mmask16(0xFFFF), vs);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(p[r * ldp + j]);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b) acc[r][b] = _mm512_fmadd_ps(s, x[b], acc[r][b]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) _mm512_mask_storeu_ps(y + r * ldy + 16 * b, b == B - 1 ? tail : __mmask16(0xFFFF), acc[r][b]);
}

// Columns [0, w) of R rows, w ≤ 16·B, as one block of the fewest 16-column
// blocks that hold them (the last one masked).
template <int R, int B, class V>
void last_columns(size_t t, size_t w, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
            const float* sc) {
  if constexpr (B > 1)
    if (w <= 16 * (B - 1)) return last_columns<R, B - 1>(t, w, p, ldp, v, ldv, y, ldy, sc);
  block<R, B>(t, p, ldp, v, ldv, y, ldy, mask16(w - 16 * (B - 1)), sc);
}

// R rows: blocks of 16·kB columns (R·kB accumulators, at most 16), the
// rest as one narrower block, so every value row is read once per call.
template <int R, class V>
void rows(size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
          const float* sc) {
  constexpr int kB = R <= 2 ? 8 : 4;
  size_t c = 0;
  for (; c + 16 * kB <= d; c += 16 * kB) block<R, kB>(t, p, ldp, v + c, ldv, y + c, ldy, __mmask16(0xFFFF), sc);
  if (c < d) last_columns<R, kB>(t, d - c, p, ldp, v + c, ldv, y + c, ldy, sc);
}

// Heads of up to 64 take four rows a pass over the values (a decode step of
// three or four query heads per KV head reads them once), wider heads two.
template <class V>
void pv(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
        const float* sc = nullptr) {
  const size_t group = d <= 64 ? 4 : 2;
  for (size_t r = 0; r < m; r += group) {
    const float* pr = p + r * ldp;
    float* yr = y + r * ldy;
    switch (std::min(group, m - r)) {
      case 4: rows<4>(t, d, pr, ldp, v, ldv, yr, ldy, sc); break;
      case 3: rows<3>(t, d, pr, ldp, v, ldv, yr, ldy, sc); break;
      case 2: rows<2>(t, d, pr, ldp, v, ldv, yr, ldy, sc); break;
      default: rows<1>(t, d, pr, ldp, v, ldv, yr, ldy, sc); break;
    }
  }
}

}  // namespace

// Sixteen lanes of vcvtph2ps / vcvtps2ph (round to nearest even), the
// conversions the AVX2 kernels do eight at a time, the scalar element for
// the tail as there.
void f16_f32_vcvt_ukernel__avx512(size_t n, const uint16_t* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  for (; i < n; ++i) y[i] = half_to_float(x[i]);
}

void f32_f16_vcvt_ukernel__avx512(size_t n, const float* x, uint16_t* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = float_to_half(x[i]);
}

// The float16 export's score chain (kv_ukernels.h) sixteen at a time: each
// of the three roundings a vcvtps2ph / vcvtph2ps pair, as the AVX2 kernel.
void f32_f16_vscaleadd_ukernel__avx512(size_t n, float* y, float scale, const uint16_t* mask) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const auto h = [](__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, kRound)); };
  const __m512 s = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask + i)));
    _mm512_storeu_ps(y + i, h(_mm512_add_ps(h(_mm512_mul_ps(h(_mm512_loadu_ps(y + i)), s)), m)));
  }
  if (i < n) f32_f16_vscaleadd_ukernel__scalar(n - i, y + i, scale, mask + i);
}

// Q·Kᵀ as the AVX2 kernel computes it, in row blocks of 4 (the AVX-512
// registers ymm16-31 hold the extra accumulators): a prompt's scores at
// twice the FMAs per load.
void f32_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                                float* s, size_t lds) {
  if (d % 8 != 0) return f32_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  qk(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_f16_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                    size_t ldk, float* s, size_t lds) {
  if (d % 8 != 0) return f32_f16_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  qk(m, t, d, q, ldq, k, ldk, s, lds);
}

void f32_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v,
                                  size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}
void f32_f16_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                      size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}

void f32_q8_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                   size_t ldk, const float* scales, float* s, size_t lds) {
  if (d % 8 != 0) return f32_q8_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, scales, s, lds);
  qk(m, t, d, q, ldq, k, ldk, s, lds, scales);
}
void f32_q8_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                     size_t ldv, const float* scales, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy, scales);
}

}  // namespace onebit
