// Blocks of 32: |x| with an and-mask, its maximum with maxps over a zero
// start (maxps returns its second operand, the running maximum, when the
// first is NaN, as `>` keeps it), the four vectors' lanes folded (no NaN
// left, so any order gives the one largest value); the quotients divided,
// rounded with roundps to nearest even and clamped, a NaN to -127 through
// the >= -127 compare; packed to bytes in element order.
#include <immintrin.h>

#include <cfloat>

#include "quant/ukernels/f32_qs8_vquant_ukernels.h"

namespace onebit {

namespace {

constexpr size_t kBlock = 32;

// One block of 32: its codes at q, returns the scale, its codes' sum in *sum.
float block32(const float* x, int8_t* q, int32_t* sum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(x + 8 * j);
    m = _mm256_max_ps(_mm256_and_ps(v[j], abs_mask), m);
  }
  m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
  const float s = _mm256_cvtss_f32(m) / 127.0f;
  if (!(s >= FLT_MIN)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_setzero_si256());
    *sum = 0;
    return 0.0f;
  }
  const __m256 sv = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i c[4];
  for (int j = 0; j < 4; ++j) {
    const __m256 r = _mm256_round_ps(_mm256_div_ps(v[j], sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 ge = _mm256_cmp_ps(r, lo, _CMP_GE_OQ);  // false for NaN
    c[j] = _mm256_cvtps_epi32(_mm256_blendv_ps(lo, _mm256_min_ps(r, hi), ge));
  }
  // Bytes come out as 4-element groups 0a 1a 2a 3a | 0b 1b 2b 3b (a: lanes
  // 0-3, b: 4-7 of each vector); the permute puts them in element order.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m256i t = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  *sum = _mm_cvtsi128_si32(h);
  return s;
}

}  // namespace

void f32_qs8_vquant_blocks_ukernel__avx2(size_t n, size_t kb, const float* x, int8_t* q, float* scale,
                                         int32_t* sum) {
  size_t b = 0, k0 = 0;
  if (kb == kBlock)
    for (; k0 + kBlock <= n; ++b, k0 += kBlock) scale[b] = block32(x + k0, q + k0, sum + b);
  if (k0 < n) f32_qs8_vquant_blocks_ukernel__scalar(n - k0, kb, x + k0, q + k0, scale + b, sum + b);
}

}  // namespace onebit
