// AVX2 Q4NX packing from the [K,N] nibble layout (quant/q4_ukernels.h).
// Per group: each row's 8 bytes split into low and high nibbles and
// interleaved back into 16 column codes; rows q and q + 4 merged into one
// byte per column; the 4 × 16 bytes transposed to 16 × 4 (column j's lane)
// by two rounds of unpacks. Column sums are kept as 16-bit counts (a group
// adds at most 8 · 15) and widened before they could overflow.
#include <immintrin.h>

#include "quant/ukernels/q4_ukernels.h"

namespace onebit {

void q4_pack_ukernel_8x16__avx2(const uint8_t* src, size_t row_bytes, size_t groups, uint8_t flip, Q4Group* out,
                                int32_t* sums) {
  const __m128i nib = _mm_set1_epi8(0x0F);
  const __m128i flips = _mm_set1_epi8(static_cast<char>(flip * 0x11));
  const auto row = [&](const uint8_t* s, size_t q) {
    return _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + q * row_bytes)), flips);
  };
  __m256i count = _mm256_setzero_si256();  // 16 × u16 column sums since the last widening
  size_t since = 0;
  const auto widen = [&] {
    __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(count));
    __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(count, 1));
    auto* s = reinterpret_cast<__m256i*>(sums);
    _mm256_storeu_si256(s, _mm256_add_epi32(_mm256_loadu_si256(s), lo));
    _mm256_storeu_si256(s + 1, _mm256_add_epi32(_mm256_loadu_si256(s + 1), hi));
    count = _mm256_setzero_si256();
    since = 0;
  };
  for (size_t g = 0; g < groups; ++g, src += kQ4GroupK * row_bytes) {
    __m128i merged[4];
    __m128i total = _mm_setzero_si128();
    for (size_t q = 0; q < 4; ++q) {
      const __m128i both = _mm_unpacklo_epi64(row(src, q), row(src, q + 4));  // bytes of rows q | q + 4
      const __m128i lo = _mm_and_si128(both, nib), hi = _mm_and_si128(_mm_srli_epi16(both, 4), nib);
      const __m128i a = _mm_unpacklo_epi8(lo, hi);  // row q: codes of columns 0..15
      const __m128i b = _mm_unpackhi_epi8(lo, hi);  // row q + 4
      merged[q] = _mm_or_si128(a, _mm_slli_epi16(b, 4));  // codes < 16: no carry across bytes
      total = _mm_add_epi8(total, _mm_add_epi8(a, b));
    }
    const __m128i t0 = _mm_unpacklo_epi8(merged[0], merged[1]), t1 = _mm_unpackhi_epi8(merged[0], merged[1]);
    const __m128i u0 = _mm_unpacklo_epi8(merged[2], merged[3]), u1 = _mm_unpackhi_epi8(merged[2], merged[3]);
    auto* o = reinterpret_cast<__m128i*>(out[g].bytes);
    _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(t0, u0));  // columns 0..3, 4 bytes each
    _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(t0, u0));
    _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(t1, u1));
    _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(t1, u1));
    count = _mm256_add_epi16(count, _mm256_cvtepu8_epi16(total));
    if (++since == 512) widen();  // 512 · 120 < 2¹⁶
  }
  widen();
}

}  // namespace onebit
