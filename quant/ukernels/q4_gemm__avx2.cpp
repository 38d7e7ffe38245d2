// AVX2 Q4NX family. A 64-byte Q4Group is two 32-byte halves of 8 columns.
//   int8 modes: vpmaddubsw is exact here. int8-row: unsigned activations ×
//     signed weights in [−15, 15], a pair at most 2·255·15 = 7650, the low-
//     and high-nibble pairs at most 15300 < 2¹⁵. int8-block: unsigned codes
//     in [0, 15] × signed q in [−127, 127], at most 2·2·15·127 = 7620 (z'·Σq
//     is subtracted per block). vpmaddwd with ones widens to int32.
//   float: codes shifted out of each lane, −8, converted, and FMA'd with
//     broadcast activations, two chains (k mod 8 < 4 and ≥ 4) per block.
// The float steps follow quant/q4_ukernels.h exactly, so results equal the
// scalar twin's. gemm: 2 rows × 16 columns; gemv: 1 row × up to 2 panels.
//
// Compiled with AVX2 flags: no header templates (see f32_gemm__avx512.cpp).
#include <immintrin.h>

#include <cstring>

#include "quant/ukernels/q4_ukernels.h"

namespace onebit {

namespace {

inline __m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 8 zero-point bytes, each repeated over the 4 bytes of its column's lane.
inline __m256i expand_zero(const uint8_t* z) {
  return _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(z))),
                            _mm256_set1_epi32(0x01010101));
}

inline void store8(float* c, __m256 v, size_t nc) {
  if (nc >= 8) {
    _mm256_storeu_ps(c, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  std::memcpy(c, tmp, nc * sizeof(float));
}

// Σ over 4 k of u·s for 8 columns (u unsigned bytes, s signed), low and
// high nibbles: exact int32.
inline __m256i quad(__m256i xl, __m256i lo, __m256i xh, __m256i hi) {
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(xl, lo), _mm256_maddubs_epi16(xh, hi));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// int8-block: where row r's sum over block b starts, −z'·Σq for the 8
// columns (`zero`: their zero points, null when every z' is 8).
inline __m256i block_start(const uint8_t* zero, size_t b, const Q4Weights& w, const Q4Acts& a, size_t r) {
  const int32_t qbias = a.qbias[r * a.blocks + b];
  if (!zero) return _mm256_set1_epi32(qbias);
  const __m256i z = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero + b * w.scale_step)));
  return _mm256_mullo_epi32(z, _mm256_set1_epi32(qbias / 8));
}

// Rows [0, R) × the 8 columns of half h of a panel, int8 modes.
template <Q4Act A, bool Z, int R>
void half_int8(const Q4Weights& w, size_t panel, size_t h, const Q4Acts& a, float* c, size_t ldc, size_t nc) {
  const Q4Panel pan = q4_panel(w, panel);
  const uint8_t* codes = pan.codes + 32 * h;
  const float* scale = pan.scale + 8 * h;
  const uint8_t* zero = Z ? pan.zero + 8 * h : nullptr;
  const uint8_t* x = static_cast<const uint8_t*>(a.data);
  const __m256i nib = _mm256_set1_epi8(0x0F);
  __m256 y[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) y[r] = _mm256_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    // int8-block starts each sum from −z'·Σq (quant/q4_ukernels.h).
    __m256i acc[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = A == Q4Act::kInt8Row ? _mm256_setzero_si256() : block_start(zero, b, w, a, r);
    // do-while: a block has at least one group, and with the for form GCC 12
    // copies every accumulator between registers on each iteration.
    size_t k = k0;
    if constexpr (A == Q4Act::kInt8Row) {
      const __m256i zv = Z ? expand_zero(zero + b * w.scale_step) : _mm256_set1_epi8(8);
      do {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + k * 8));
        const __m256i lo = _mm256_sub_epi8(_mm256_and_si256(v, nib), zv);
        const __m256i hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(v, 4), nib), zv);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const uint8_t* xr = x + r * a.lda + k;
          acc[r] = _mm256_add_epi32(acc[r], quad(bcast4(xr), lo, bcast4(xr + 4), hi));
        }
        k += 8;
      } while (k < kend);
    } else {  // int8-block: codes unsigned, q signed, z'·Σq subtracted below
      do {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + k * 8));
        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const uint8_t* xr = x + r * a.lda + k;
          acc[r] = _mm256_add_epi32(acc[r], quad(lo, bcast4(xr), hi, bcast4(xr + 4)));
        }
        k += 8;
      } while (k < kend);
    }
    const __m256 sv = _mm256_loadu_ps(scale + b * w.scale_step);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if (A == Q4Act::kInt8Row) {
        y[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), sv, y[r]);
      } else {
        const __m256 sb = _mm256_mul_ps(sv, _mm256_set1_ps(a.scale[r * a.blocks + b]));
        y[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), sb, y[r]);
      }
    }
  }
  const size_t col = panel * 16 + 8 * h;
  const __m256 bias = _mm256_loadu_ps(w.bias + col);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    __m256 out;
    if (A == Q4Act::kInt8Row) {
      const __m256 t = _mm256_fnmadd_ps(_mm256_set1_ps(float(a.zero[r])), _mm256_loadu_ps(w.g + col), y[r]);
      out = _mm256_fmadd_ps(t, _mm256_set1_ps(a.scale[r]), bias);
    } else {
      out = _mm256_add_ps(y[r], bias);
    }
    store8(c + r * ldc, out, nc);
  }
}

// Code t of each lane (t < 4: low nibble of byte t; t ≥ 4: high nibble of
// byte t − 4), as the float c − 8.
inline __m256 weight(__m256i v, int t) {
  const int shift = (t % 4) * 8 + (t / 4) * 4;
  const __m256i c = _mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(15));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8)));
}

// Rows [0, R) × the 8 columns of half h of a panel, float activations.
template <bool Z, int R>
void half_f32(const Q4Weights& w, size_t panel, size_t h, const Q4Acts& a, float* c, size_t ldc, size_t nc) {
  const Q4Panel pan = q4_panel(w, panel);
  const uint8_t* codes = pan.codes + 32 * h;
  const float* scale = pan.scale + 8 * h;
  const uint8_t* zero = Z ? pan.zero + 8 * h : nullptr;
  const float* x = static_cast<const float*>(a.data);
  __m256 y[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) y[r] = _mm256_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    __m256 lo[R], hi[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    size_t k = k0;
    do {
      const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + k * 8));
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m256 wl = weight(v, t), wh = weight(v, t + 4);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const float* xr = x + r * a.lda + k;
          lo[r] = _mm256_fmadd_ps(_mm256_set1_ps(xr[t]), wl, lo[r]);
          hi[r] = _mm256_fmadd_ps(_mm256_set1_ps(xr[t + 4]), wh, hi[r]);
        }
      }
      k += 8;
    } while (k < kend);
    const __m256 sv = _mm256_loadu_ps(scale + b * w.scale_step);
    __m256 zf = _mm256_setzero_ps();
    if (Z) {
      const __m256i z = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero + b * w.scale_step)));
      zf = _mm256_cvtepi32_ps(_mm256_sub_epi32(z, _mm256_set1_epi32(8)));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m256 t = _mm256_add_ps(lo[r], hi[r]);
      if (Z) t = _mm256_fnmadd_ps(zf, _mm256_set1_ps(a.bsum[r * a.blocks + b]), t);
      y[r] = _mm256_fmadd_ps(t, sv, y[r]);
    }
  }
  const __m256 bias = _mm256_loadu_ps(w.bias + panel * 16 + 8 * h);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store8(c + r * ldc, _mm256_add_ps(y[r], bias), nc);
}

// Decode: one row × S panels that lie apart in memory, read side by side,
// both halves of each at once. Per half the same exact integer block sums
// and float steps as half_int8<A, Z, 1>; a panel's zero points are read when
// its weights have them.
template <Q4Act A, int S>
void gemv_streams(const Q4Weights* const* w, const size_t* panel, const Q4Acts& a, float* const* c,
                  const size_t* nc) {
  const uint8_t* x = static_cast<const uint8_t*>(a.data);
  const __m256i nib = _mm256_set1_epi8(0x0F);
  __m256 y[S][2];
  Q4Panel pan[S];
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s) {
    pan[s] = q4_panel(*w[s], panel[s]);
    y[s][0] = y[s][1] = _mm256_setzero_ps();
  }
  const size_t kp = w[0]->kp, kblock = w[0]->kblock, step = w[0]->scale_step;
  size_t b = 0;
  for (size_t k0 = 0; k0 < kp; k0 += kblock, ++b) {
    const size_t kend = k0 + kblock < kp ? k0 + kblock : kp;
    __m256i acc[S][2];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < 2; ++h) {
        const uint8_t* zh = pan[s].zero ? pan[s].zero + 8 * h : nullptr;
        acc[s][h] = A == Q4Act::kInt8Row ? _mm256_setzero_si256() : block_start(zh, b, *w[s], a, 0);
      }
    for (size_t k = k0; k < kend; k += 8) {
      const __m256i xl = bcast4(x + k), xh = bcast4(x + k + 4);
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
        _mm_prefetch(reinterpret_cast<const char*>(pan[s].codes + k * 8) + 2048, _MM_HINT_T1);
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(pan[s].codes + k * 8 + 32 * h));
          const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
          if constexpr (A == Q4Act::kInt8Row) {
            const __m256i zv = pan[s].zero ? expand_zero(pan[s].zero + 8 * h + b * step) : _mm256_set1_epi8(8);
            acc[s][h] = _mm256_add_epi32(acc[s][h], quad(xl, _mm256_sub_epi8(lo, zv), xh, _mm256_sub_epi8(hi, zv)));
          } else {
            acc[s][h] = _mm256_add_epi32(acc[s][h], quad(lo, xl, hi, xh));
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < 2; ++h) {
        const __m256 sv = _mm256_loadu_ps(pan[s].scale + 8 * h + b * step);
        if (A == Q4Act::kInt8Row) {
          y[s][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[s][h]), sv, y[s][h]);
        } else {
          const __m256 sb = _mm256_mul_ps(sv, _mm256_set1_ps(a.scale[b]));
          y[s][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[s][h]), sb, y[s][h]);
        }
      }
  }
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s)
    for (size_t h = 0; h < 2 && 8 * h < nc[s]; ++h) {
      const size_t col = panel[s] * 16 + 8 * h;
      const __m256 bias = _mm256_loadu_ps(w[s]->bias + col);
      __m256 out;
      if (A == Q4Act::kInt8Row) {
        const __m256 t = _mm256_fnmadd_ps(_mm256_set1_ps(float(a.zero[0])), _mm256_loadu_ps(w[s]->g + col), y[s][h]);
        out = _mm256_fmadd_ps(t, _mm256_set1_ps(a.scale[0]), bias);
      } else {
        out = _mm256_add_ps(y[s][h], bias);
      }
      store8(c[s] + 8 * h, out, nc[s] - 8 * h);
    }
}

template <Q4Act A, bool Z, int R>
void panel_rows(size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c, size_t ldc) {
  for (size_t h = 0; h < 2 && 8 * h < nc; ++h) {
    if constexpr (A == Q4Act::kFloat) half_f32<Z, R>(w, panel, h, a, c + 8 * h, ldc, nc - 8 * h);
    else half_int8<A, Z, R>(w, panel, h, a, c + 8 * h, ldc, nc - 8 * h);
  }
}

}  // namespace

template <Q4Act A, bool Z>
void q4_gemm_ukernel_2x16c8__avx2(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                  float* c, size_t ldc) {
  if (mr >= 2) return panel_rows<A, Z, 2>(nc, w, panel, a, c, ldc);
  panel_rows<A, Z, 1>(nc, w, panel, a, c, ldc);
}

template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x32c8__avx2(size_t /*mr*/, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                  float* c, size_t /*ldc*/) {
  panel_rows<A, Z, 1>(nc < 16 ? nc : 16, w, panel, a, c, 0);
  if (nc > 16) panel_rows<A, Z, 1>(nc - 16, w, panel + 1, a, c + 16, 0);
}

template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s2__avx2(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                          const Q4Acts& a, float* const* c, const size_t* nc) {
  size_t s = 0;
  for (; s + 2 <= streams; s += 2) gemv_streams<A, 2>(w + s, panel + s, a, c + s, nc + s);
  if (s < streams) gemv_streams<A, 1>(w + s, panel + s, a, c + s, nc + s);
}
template void q4_gemv_streams_ukernel_1x16s2__avx2<Q4Act::kInt8Row>(size_t, const Q4Weights* const*, const size_t*,
                                                                     const Q4Acts&, float* const*, const size_t*);
template void q4_gemv_streams_ukernel_1x16s2__avx2<Q4Act::kInt8Block>(size_t, const Q4Weights* const*,
                                                                       const size_t*, const Q4Acts&, float* const*,
                                                                       const size_t*);

#define INSTANTIATE(A, Z)                                                                                      \
  template void q4_gemm_ukernel_2x16c8__avx2<A, Z>(size_t, size_t, const Q4Weights&, size_t, const Q4Acts&,    \
                                                   float*, size_t);                                            \
  template void q4_gemv_ukernel_1x32c8__avx2<A, Z>(size_t, size_t, const Q4Weights&, size_t, const Q4Acts&,    \
                                                   float*, size_t);
INSTANTIATE(Q4Act::kInt8Row, false)
INSTANTIATE(Q4Act::kInt8Row, true)
INSTANTIATE(Q4Act::kInt8Block, false)
INSTANTIATE(Q4Act::kInt8Block, true)
INSTANTIATE(Q4Act::kFloat, false)
INSTANTIATE(Q4Act::kFloat, true)
#undef INSTANTIATE

}  // namespace onebit
