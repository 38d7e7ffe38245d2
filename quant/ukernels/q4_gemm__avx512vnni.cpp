// AVX-512 VNNI Q4NX family, int8 activations (int8-row and int8-block).
// One 64-byte Q4Group is 8 k × 16 columns; masking and a 16-bit shift split
// it into two registers of 4 k × 16 columns, from which the block's zero
// points are subtracted bytewise, giving signed weights in [−15, 15]; each
// feeds one vpdpbusd with the activations' unsigned bytes broadcast four at
// a time. int8-block also sums 128·w per column with a third vpdpbusd,
// shared by all rows of the tile. The float steps per block follow
// quant/q4_ukernels.h exactly, so results equal the scalar twin's.
//
// gemm: 8 rows × 16 columns. gemv (decode): 1 row × up to 4 panels, each
// with separate low/high accumulators so 8 vpdpbusd chains are in flight
// over 4 sequential weight streams, prefetched kPrefetchBytes ahead.
//
// Compiled with AVX-512 flags: no header templates (see f32_gemm__avx512.cpp).

#include "quant/ukernels/q4_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {

namespace {

constexpr size_t kPrefetchBytes = 768;

// 16 zero-point bytes, each repeated over the 4 bytes of its column's lane.
inline __m512i expand_zero(const uint8_t* z) {
  return _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z))),
                            _mm512_set1_epi32(0x01010101));
}

struct Split {
  __m512i lo, hi;  // k0..k0+3 and k0+4..k0+7 as signed weights
};

inline Split split(const uint8_t* group, __m512i zero) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_load_si512(group);
  return {_mm512_sub_epi8(_mm512_and_si512(v, nib), zero),
          _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), nib), zero)};
}

inline __m512i dot(__m512i acc, __m512i x, __m512i w) { return dpbusd(acc, x, w); }

// The per-block float step of one row (quant/q4_ukernels.h).
template <Q4Act A>
inline __m512 block_step(__m512 y, __m512i acc, __m512i wsum128, __m512 sv, const Q4Acts& a, size_t r, size_t b) {
  if constexpr (A == Q4Act::kInt8Row) return _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sv, y);
  const __m512 sb = _mm512_mul_ps(sv, _mm512_set1_ps(a.scale[r * a.blocks + b]));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc, wsum128)), sb, y);
}

template <Q4Act A>
inline void finish(__m512 y, const Q4Weights& w, size_t col, const Q4Acts& a, size_t r, size_t nc, float* c) {
  const __m512 bias = _mm512_loadu_ps(w.bias + col);
  __m512 out;
  if constexpr (A == Q4Act::kInt8Row) {
    const __m512 t = _mm512_fnmadd_ps(_mm512_set1_ps(float(a.zero[r])), _mm512_loadu_ps(w.g + col), y);
    out = _mm512_fmadd_ps(t, _mm512_set1_ps(a.scale[r]), bias);
  } else {
    out = _mm512_add_ps(y, bias);
  }
  _mm512_mask_storeu_ps(c, mask16(nc), out);
}

template <Q4Act A, bool Z, int R>
void tile(size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c, size_t ldc) {
  const auto [codes, scale, zero] = q4_panel(w, panel);
  const uint8_t* x = static_cast<const uint8_t*>(a.data);
  const __m512i b128 = _mm512_set1_epi8(char(0x80));
  __m512 y[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) y[r] = _mm512_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    const __m512i zv = Z ? expand_zero(zero + b * w.scale_step) : _mm512_set1_epi8(8);
    __m512i acc[R], wsum = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    // do-while: a block has at least one group, and with the for form GCC 12
    // copies every accumulator between registers on each iteration.
    size_t k = k0;
    do {
      const Split s = split(codes + k * 8, zv);
      if (A == Q4Act::kInt8Block) wsum = dot(dot(wsum, b128, s.lo), b128, s.hi);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const uint8_t* xr = x + r * a.lda + k;
        acc[r] = dot(dot(acc[r], bcast4(xr), s.lo), bcast4(xr + 4), s.hi);
      }
      k += 8;
    } while (k < kend);
    const __m512 sv = _mm512_loadu_ps(scale + b * w.scale_step);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) y[r] = block_step<A>(y[r], acc[r], wsum, sv, a, r, b);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) finish<A>(y[r], w, panel * 16, a, r, nc, c + r * ldc);
}

template <Q4Act A, bool Z, int P>
void gemv_tile(size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c) {
  Q4Panel pan[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) pan[p] = q4_panel(w, panel + p);
  const uint8_t* x = static_cast<const uint8_t*>(a.data);
  const __m512i b128 = _mm512_set1_epi8(char(0x80));
  __m512 y[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) y[p] = _mm512_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    __m512i zv[P], lo[P], hi[P], wsum[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      zv[p] = Z ? expand_zero(pan[p].zero + b * w.scale_step) : _mm512_set1_epi8(8);
      lo[p] = hi[p] = wsum[p] = _mm512_setzero_si512();
    }
    size_t k = k0;
    do {
      const __m512i xl = bcast4(x + k), xh = bcast4(x + k + 4);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        _mm_prefetch(reinterpret_cast<const char*>(pan[p].codes + k * 8 + kPrefetchBytes), _MM_HINT_T0);
        const Split s = split(pan[p].codes + k * 8, zv[p]);
        if (A == Q4Act::kInt8Block) wsum[p] = dot(dot(wsum[p], b128, s.lo), b128, s.hi);
        lo[p] = dot(lo[p], xl, s.lo);
        hi[p] = dot(hi[p], xh, s.hi);
      }
      k += 8;
    } while (k < kend);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
      y[p] = block_step<A>(y[p], _mm512_add_epi32(lo[p], hi[p]), wsum[p], _mm512_loadu_ps(pan[p].scale + b * w.scale_step),
                           a, 0, b);
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) finish<A>(y[p], w, (panel + p) * 16, a, 0, nc - 16 * p, c + 16 * p);
}

}  // namespace

template <Q4Act A, bool Z>
void q4_gemm_ukernel_8x16c8__avx512vnni(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                        float* c, size_t ldc) {
  switch (mr) {
    case 1: return tile<A, Z, 1>(nc, w, panel, a, c, ldc);
    case 2: return tile<A, Z, 2>(nc, w, panel, a, c, ldc);
    case 3: return tile<A, Z, 3>(nc, w, panel, a, c, ldc);
    case 4: return tile<A, Z, 4>(nc, w, panel, a, c, ldc);
    case 5: return tile<A, Z, 5>(nc, w, panel, a, c, ldc);
    case 6: return tile<A, Z, 6>(nc, w, panel, a, c, ldc);
    case 7: return tile<A, Z, 7>(nc, w, panel, a, c, ldc);
    default: return tile<A, Z, 8>(nc, w, panel, a, c, ldc);
  }
}

template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x64c8__avx512vnni(size_t /*mr*/, size_t nc, const Q4Weights& w, size_t panel,
                                        const Q4Acts& a, float* c, size_t /*ldc*/) {
  switch ((nc + 15) / 16) {
    case 1: return gemv_tile<A, Z, 1>(nc, w, panel, a, c);
    case 2: return gemv_tile<A, Z, 2>(nc, w, panel, a, c);
    case 3: return gemv_tile<A, Z, 3>(nc, w, panel, a, c);
    default: return gemv_tile<A, Z, 4>(nc, w, panel, a, c);
  }
}

#define INSTANTIATE(A, Z)                                                                                      \
  template void q4_gemm_ukernel_8x16c8__avx512vnni<A, Z>(size_t, size_t, const Q4Weights&, size_t,             \
                                                         const Q4Acts&, float*, size_t);                       \
  template void q4_gemv_ukernel_1x64c8__avx512vnni<A, Z>(size_t, size_t, const Q4Weights&, size_t,             \
                                                         const Q4Acts&, float*, size_t);
INSTANTIATE(Q4Act::kInt8Row, false)
INSTANTIATE(Q4Act::kInt8Row, true)
INSTANTIATE(Q4Act::kInt8Block, false)
INSTANTIATE(Q4Act::kInt8Block, true)
#undef INSTANTIATE

}  // namespace onebit
