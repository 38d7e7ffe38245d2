// Sixteen lanes of exp_f32 (quant/ukernels/f32_vexp_ukernels.h), operation
// for operation as the AVX2 kernel's eight, so a lane, an AVX2 lane and the
// scalar tail agree bit for bit. Twice the lanes an instruction: the AVX2
// loop's chain of ~30 dependent operations leaves Zen 4 waiting on their
// latency, and each 512-bit instruction does twice the work for it
// (docs/BENCHMARK.md "A 512-bit exp").
#include "quant/ukernels/simd_avx512.h"

#include "quant/ukernels/f32_vexp_ukernels.h"

namespace onebit {

namespace {

inline __m512 exp_f32x16(__m512 x) {
  using namespace exp_detail;
  const __m512 v = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kLo)), _mm512_set1_ps(kHi));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_sub_ps(v, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Hi)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Lo)));
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kP[i]));
  const __m512 er = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n), half = _mm512_srai_epi32(ni, 1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(half, bias), 23));
  const __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, half), bias), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(er, a), b);
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kLo), _CMP_LT_OQ), y, _mm512_setzero_ps());
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kHi), _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

}  // namespace

void f32_vexp_ukernel__avx512(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp_f32x16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
}

void f32_vsigmoid_ukernel__avx512(size_t n, const float* x, float* y) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_f32x16(_mm512_sub_ps(zero, _mm512_loadu_ps(x + i)));
    _mm512_storeu_ps(y + i, _mm512_div_ps(one, _mm512_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = 1.0f / (1.0f + exp_f32(0.0f - x[i]));
}

}  // namespace onebit
