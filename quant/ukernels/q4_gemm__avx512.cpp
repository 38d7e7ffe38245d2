// AVX-512 Q4NX family, float activations: weights are dequantized in
// registers and never stored. vpermps looks a code up in a 16-entry table
// of c − 8 using only the low 4 bits of each lane, so one shift and one
// permute turn a Q4Group lane into the weight of one k for 16 columns. Two
// FMA chains per block (k mod 8 < 4 and ≥ 4) and the per-block steps follow
// quant/q4_ukernels.h exactly, so results equal the scalar twin's.
//
// gemm: 8 rows × 16 columns (16 accumulators + 8 block sums). gemv: 1 row ×
// up to 4 panels, 8 FMA chains over 4 weight streams.
//
// Compiled with AVX-512 flags: no header templates (see f32_gemm__avx512.cpp).

#include "quant/ukernels/q4_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {

namespace {

constexpr size_t kPrefetchBytes = 768;

inline __m512 table() {
  return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
}

// The weight of k0 + t for the 16 columns of a group: code t of each lane
// (t < 4: low nibble of byte t; t ≥ 4: high nibble of byte t − 4).
template <int T>
inline __m512 weight(__m512i v, __m512 tab) {
  constexpr int shift = (T % 4) * 8 + (T / 4) * 4;
  return _mm512_permutexvar_ps(shift ? _mm512_srli_epi32(v, shift) : v, tab);
}

// (z' − 8) per column as float.
inline __m512 zero_f32(const uint8_t* z) {
  const __m512i zi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z)));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(zi, _mm512_set1_epi32(8)));
}

template <bool Z, int R>
void tile(size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c, size_t ldc) {
  const Q4Panel pan = q4_panel(w, panel);
  const uint8_t *codes = pan.codes, *zero = pan.zero;
  const float* x = static_cast<const float*>(a.data);
  const __m512 tab = table();
  __m512 y[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) y[r] = _mm512_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    __m512 lo[R], hi[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
    // do-while: a block has at least one group, and with the for form GCC 12
    // copies every accumulator between registers on each iteration.
    size_t k = k0;
    do {
      const __m512i v = _mm512_load_si512(codes + k * 8);
#define STEP(T)                                                                       \
  {                                                                                   \
    const __m512 wl = weight<T>(v, tab), wh = weight<T + 4>(v, tab);                  \
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {                             \
      const float* xr = x + r * a.lda + k;                                            \
      lo[r] = _mm512_fmadd_ps(_mm512_set1_ps(xr[T]), wl, lo[r]);                      \
      hi[r] = _mm512_fmadd_ps(_mm512_set1_ps(xr[T + 4]), wh, hi[r]);                  \
    }                                                                                 \
  }
      STEP(0) STEP(1) STEP(2) STEP(3)
#undef STEP
      k += 8;
    } while (k < kend);
    const __m512 sv = load_scales16(pan.scale, pan.scale_h, b * w.scale_step);
    const __m512 zf = Z ? zero_f32(zero + b * w.scale_step) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 t = _mm512_add_ps(lo[r], hi[r]);
      if (Z) t = _mm512_fnmadd_ps(zf, _mm512_set1_ps(a.bsum[r * a.blocks + b]), t);
      y[r] = _mm512_fmadd_ps(t, sv, y[r]);
    }
  }
  const __m512 bias = _mm512_loadu_ps(w.bias + panel * 16);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(c + r * ldc, mask16(nc), _mm512_add_ps(y[r], bias));
}

template <bool Z, int P>
void gemv_tile(size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c) {
  Q4Panel pan[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) pan[p] = q4_panel(w, panel + p);
  const float* x = static_cast<const float*>(a.data);
  const __m512 tab = table();
  __m512 y[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) y[p] = _mm512_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    __m512 lo[P], hi[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) lo[p] = hi[p] = _mm512_setzero_ps();
    size_t k = k0;
    do {
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(pan[p].codes + k * 8 + kPrefetchBytes), _MM_HINT_T0);
        const __m512i v = _mm512_load_si512(pan[p].codes + k * 8);
        lo[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 0]), weight<0>(v, tab), lo[p]);
        hi[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 4]), weight<4>(v, tab), hi[p]);
        lo[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 1]), weight<1>(v, tab), lo[p]);
        hi[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 5]), weight<5>(v, tab), hi[p]);
        lo[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 2]), weight<2>(v, tab), lo[p]);
        hi[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 6]), weight<6>(v, tab), hi[p]);
        lo[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 3]), weight<3>(v, tab), lo[p]);
        hi[p] = _mm512_fmadd_ps(_mm512_set1_ps(x[k + 7]), weight<7>(v, tab), hi[p]);
      }
      k += 8;
    } while (k < kend);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      __m512 t = _mm512_add_ps(lo[p], hi[p]);
      if (Z) t = _mm512_fnmadd_ps(zero_f32(pan[p].zero + b * w.scale_step), _mm512_set1_ps(a.bsum[b]), t);
      y[p] = _mm512_fmadd_ps(t, load_scales16(pan[p].scale, pan[p].scale_h, b * w.scale_step), y[p]);
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    const __m512 bias = _mm512_loadu_ps(w.bias + (panel + p) * 16);
    _mm512_mask_storeu_ps(c + 16 * p, mask16(nc - 16 * p), _mm512_add_ps(y[p], bias));
  }
}

}  // namespace

template <Q4Act A, bool Z>
void q4_gemm_ukernel_8x16c8__avx512(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                    float* c, size_t ldc) {
  static_assert(A == Q4Act::kFloat, "the AVX-512 family (without VNNI) only has the float kernels");
  switch (mr) {
    case 1: return tile<Z, 1>(nc, w, panel, a, c, ldc);
    case 2: return tile<Z, 2>(nc, w, panel, a, c, ldc);
    case 3: return tile<Z, 3>(nc, w, panel, a, c, ldc);
    case 4: return tile<Z, 4>(nc, w, panel, a, c, ldc);
    case 5: return tile<Z, 5>(nc, w, panel, a, c, ldc);
    case 6: return tile<Z, 6>(nc, w, panel, a, c, ldc);
    case 7: return tile<Z, 7>(nc, w, panel, a, c, ldc);
    default: return tile<Z, 8>(nc, w, panel, a, c, ldc);
  }
}

template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x64c8__avx512(size_t /*mr*/, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                    float* c, size_t /*ldc*/) {
  static_assert(A == Q4Act::kFloat, "the AVX-512 family (without VNNI) only has the float kernels");
  switch ((nc + 15) / 16) {
    case 1: return gemv_tile<Z, 1>(nc, w, panel, a, c);
    case 2: return gemv_tile<Z, 2>(nc, w, panel, a, c);
    case 3: return gemv_tile<Z, 3>(nc, w, panel, a, c);
    default: return gemv_tile<Z, 4>(nc, w, panel, a, c);
  }
}

template void q4_gemm_ukernel_8x16c8__avx512<Q4Act::kFloat, false>(size_t, size_t, const Q4Weights&, size_t,
                                                                   const Q4Acts&, float*, size_t);
template void q4_gemm_ukernel_8x16c8__avx512<Q4Act::kFloat, true>(size_t, size_t, const Q4Weights&, size_t,
                                                                  const Q4Acts&, float*, size_t);
template void q4_gemv_ukernel_1x64c8__avx512<Q4Act::kFloat, false>(size_t, size_t, const Q4Weights&, size_t,
                                                                   const Q4Acts&, float*, size_t);
template void q4_gemv_ukernel_1x64c8__avx512<Q4Act::kFloat, true>(size_t, size_t, const Q4Weights&, size_t,
                                                                  const Q4Acts&, float*, size_t);

}  // namespace onebit
