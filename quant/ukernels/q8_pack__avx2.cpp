// AVX2 A8W8 packing from the [K,N] layout (quant/q8_ukernels.h): 16 columns
// of a group's KR rows at a time, interleaved by byte unpacks (KR = 2) and
// then 16-bit unpacks (KR = 4), so each column's KR bytes land side by side.
#include <immintrin.h>

#include "quant/ukernels/q8_ukernels.h"

namespace onebit {

namespace {

inline __m128i load16(const uint8_t* p, __m128i flip) {
  return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), flip);
}
inline void store16(uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

}  // namespace

void q8_pack_ukernel_c2__avx2(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out) {
  const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
  for (size_t g = 0; g < groups; ++g, src += 2 * ldw, out += nr * 2)
    for (size_t j = 0; j < nr; j += 16) {
      const __m128i r0 = load16(src + j, f), r1 = load16(src + ldw + j, f);
      store16(out + j * 2, _mm_unpacklo_epi8(r0, r1));  // columns j .. j + 7, 2 bytes each
      store16(out + j * 2 + 16, _mm_unpackhi_epi8(r0, r1));
    }
}

void q8_pack_ukernel_c4__avx2(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out) {
  const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
  for (size_t g = 0; g < groups; ++g, src += 4 * ldw, out += nr * 4)
    for (size_t j = 0; j < nr; j += 16) {
      const __m128i r0 = load16(src + j, f), r1 = load16(src + ldw + j, f);
      const __m128i r2 = load16(src + 2 * ldw + j, f), r3 = load16(src + 3 * ldw + j, f);
      const __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
      const __m128i u0 = _mm_unpacklo_epi8(r2, r3), u1 = _mm_unpackhi_epi8(r2, r3);
      store16(out + j * 4, _mm_unpacklo_epi16(t0, u0));  // columns j .. j + 3, 4 bytes each
      store16(out + j * 4 + 16, _mm_unpackhi_epi16(t0, u0));
      store16(out + j * 4 + 32, _mm_unpacklo_epi16(t1, u1));
      store16(out + j * 4 + 48, _mm_unpackhi_epi16(t1, u1));
    }
}

}  // namespace onebit
