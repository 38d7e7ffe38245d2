// The Q·Kᵀ kernel body shared by the AVX2 and AVX-512 KV kernel files (which
// alone include it, under their own flags; internal linkage). Only 256-bit
// AVX2 operations, so the AVX-512 file computes every score exactly as the
// AVX2 one does; it only has 32 registers for taller row blocks.
//
// Per score eight lane chains over d (lane l sums i ≡ l mod 8, one FMA each
// in i order from zero), then one hadd tree for four keys at once:
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), as kv_ukernels.h fixes. d is a
// multiple of 8 (the callers send other head sizes to the scalar kernel).
//   decode (one or two rows): key by key, so the cache is read as one
//     stream — the four keys side by side read the head as four streams,
//     measured ~2x slower for a float32 cache — prefetched Ahead bytes on
//     (0: the hardware prefetcher alone). The AVX-512 file runs a decode
//     on its own qk_pairs instead (two keys a 512-bit register, the same
//     lane chains);
//   more rows: keys in blocks of 64 kept in L1 while every row block runs
//     over them, the four keys side by side (more FMAs per load); when
//     one row block takes every row (a decode of three or four query heads
//     per KV head), prefetched Ahead bytes on as well.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace onebit {
namespace {  // deliberately per translation unit, see above

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// int8 codes: eight values scale · code (q8_value), the scale broadcast.
inline __m256 load8(const int8_t* p, __m256 scale) {
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_mul_ps(scale, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)));
}
inline __m256 load8(const float* p, __m256) { return load8(p); }
inline __m256 load8(const uint16_t* p, __m256) { return load8(p); }

// Lane j: the sum of a_j's lanes, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline __m128 sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// The first nk (1 to 4) of four scores to s.
inline void store_scores(float* s, size_t nk, __m128 v) {
  if (nk == 4) {
    _mm_storeu_ps(s, v);
    return;
  }
  alignas(16) float out[4];
  _mm_store_ps(out, v);
  for (size_t x = 0; x < nk; ++x) s[x] = out[x];
}

// R rows against keys [0, t), four at a time; a last group of fewer repeats
// its first key and stores only what it has. Streamed: key by key. sc: the
// keys' scales for int8 keys (null otherwise). Ahead: see above.
template <int R, bool Streamed, size_t Ahead, class K>
void qk_rows(size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s, size_t lds,
             const float* sc) {
  for (size_t j = 0; j < t; j += 4) {
    const size_t nk = std::min<size_t>(4, t - j);
    const size_t at[4] = {j, j + (nk > 1), j + 2 * (nk > 2), j + 3 * (nk > 3)};
    const K* keys[4] = {k + at[0] * ldk, k + at[1] * ldk, k + at[2] * ldk, k + at[3] * ldk};
    __m256 ks[4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) ks[x] = sc ? _mm256_set1_ps(sc[at[x]]) : _mm256_setzero_ps();
    __m256 acc[R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm256_setzero_ps();
    if constexpr (Ahead > 0) {
      const char* ahead = reinterpret_cast<const char*>(k + j * ldk) + Ahead;
      for (size_t off = 0; off < 4 * ldk * sizeof(K); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
      if (sc) _mm_prefetch(reinterpret_cast<const char*>(sc + j) + 256, _MM_HINT_T0);
    }
    if (Streamed) {
#pragma GCC unroll 4
      for (int x = 0; x < 4; ++x)
        for (size_t i = 0; i < d; i += 8) {
          const __m256 b = load8(keys[x] + i, ks[x]);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) acc[r][x] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * ldq + i), b, acc[r][x]);
        }
    } else {
      for (size_t i = 0; i < d; i += 8) {
        const __m256 b0 = load8(keys[0] + i, ks[0]), b1 = load8(keys[1] + i, ks[1]),
                     b2 = load8(keys[2] + i, ks[2]), b3 = load8(keys[3] + i, ks[3]);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256 a = _mm256_loadu_ps(q + r * ldq + i);
          acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
          acc[r][2] = _mm256_fmadd_ps(a, b2, acc[r][2]);
          acc[r][3] = _mm256_fmadd_ps(a, b3, acc[r][3]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) store_scores(s + r * lds + j, nk, sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
  }
}

// S = Q·Kᵀ over blocks of 64 keys kept in L1 while row blocks of up to
// MaxRows (2 or 4; with 4, three last rows are one block too) run over them;
// each group of four keys prefetches Ahead bytes on.
template <int MaxRows, size_t Ahead, class K>
void qk_blocks(size_t m, size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s,
               size_t lds, const float* sc) {
  constexpr size_t kBlock = 64;
  for (size_t j0 = 0; j0 < t; j0 += kBlock) {
    const size_t n = std::min(kBlock, t - j0);
    const float* scj = sc ? sc + j0 : nullptr;
    size_t r = 0;
    if constexpr (MaxRows >= 4) {
      for (; r + 4 <= m; r += 4)
        qk_rows<4, false, Ahead>(n, d, q + r * ldq, ldq, k + j0 * ldk, ldk, s + r * lds + j0, lds, scj);
      if (m - r == 3) {  // three rows in one pass over the block (a decode of three query heads per KV head)
        qk_rows<3, false, Ahead>(n, d, q + r * ldq, ldq, k + j0 * ldk, ldk, s + r * lds + j0, lds, scj);
        r += 3;
      }
    }
    for (; r + 2 <= m; r += 2)
      qk_rows<2, false, Ahead>(n, d, q + r * ldq, ldq, k + j0 * ldk, ldk, s + r * lds + j0, lds, scj);
    if (r < m) qk_rows<1, false, Ahead>(n, d, q + r * ldq, ldq, k + j0 * ldk, ldk, s + r * lds + j0, lds, scj);
  }
}

// S = Q·Kᵀ: one or two rows key by key (streamed), more in qk_blocks. A
// decode's stream prefetched Ahead bytes on; so are a decode's three or
// four query heads per KV head (m ≤ MaxRows: the keys read once, in one
// pass of one row block), which would otherwise start each head's stream
// from DRAM unaided. A prompt's row blocks reuse each key block from L1.
template <int MaxRows, size_t Ahead, class K>
void kv_qk(size_t m, size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s,
           size_t lds, const float* sc = nullptr) {
  if (m <= 2) {
    if (m == 2) qk_rows<2, true, Ahead>(t, d, q, ldq, k, ldk, s, lds, sc);
    else if (m == 1) qk_rows<1, true, Ahead>(t, d, q, ldq, k, ldk, s, lds, sc);
    return;
  }
  if (m <= MaxRows) return qk_blocks<MaxRows, Ahead>(m, t, d, q, ldq, k, ldk, s, lds, sc);
  qk_blocks<MaxRows, 0>(m, t, d, q, ldq, k, ldk, s, lds, sc);
}

}  // namespace
}  // namespace onebit
