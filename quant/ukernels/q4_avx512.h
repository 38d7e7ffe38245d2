// Helpers shared by the Q4NX AVX-512 kernel files (q4_gemm__avx512vnni.cpp,
// q4_gemm__amx.cpp), which alone include this header: internal linkage, as
// simd_avx512.h says why.
#pragma once

#include "quant/ukernels/q4_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {
namespace {  // deliberately per translation unit

// 16 zero-point bytes, each repeated over the 4 bytes of its column's lane.
inline __m512i expand_zero(const uint8_t* z) {
  return _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z))),
                            _mm512_set1_epi32(0x01010101));
}

struct Split {
  __m512i lo, hi;  // k0..k0+3 and k0+4..k0+7
};

// The codes as they are (int8-block's unsigned operand).
inline Split split(const uint8_t* group) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_load_si512(group);
  return {_mm512_and_si512(v, nib), _mm512_and_si512(_mm512_srli_epi16(v, 4), nib)};
}

// The codes less their zero points: signed weights (int8-row).
inline Split split(const uint8_t* group, __m512i zero) {
  const Split s = split(group);
  return {_mm512_sub_epi8(s.lo, zero), _mm512_sub_epi8(s.hi, zero)};
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

}  // namespace
}  // namespace onebit
