// Sixteen lanes of exp_f32 (quant/ukernels/f32_vexp_ukernels.h), operation
// for operation as the AVX2 kernel's eight, so a lane, an AVX2 lane and the
// scalar tail agree bit for bit. Twice the lanes an instruction: measured
// 1.5x the AVX2 kernel's elements a second on a Zen 4, whose AVX2 loop ran
// ~35 instructions a vector in ~22 cycles, far from its pipes' throughput
// (docs/BENCHMARK.md "A 512-bit exp").
#include "quant/ukernels/simd_avx512.h"

#include "quant/ukernels/f32_vexp_ukernels.h"

#include <algorithm>
#include <limits>

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

// f32_vexp_ukernels.h's Softmax row as the AVX2 kernel computes it, sixteen
// lanes at a time: each register's low eight entries go to the eight double
// lane sums before its high eight, as two groups of 8 would; a last whole
// group of 8 runs masked.
void f32_vsoftmax_ukernel__avx512(size_t n, const float* x, float* y) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  __m512 lanes = _mm512_set1_ps(-kInf);
  __mmask16 nans = 0;
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512 v = _mm512_loadu_ps(x + k);
    lanes = _mm512_max_ps(v, lanes);  // a NaN v keeps the lane's max
    nans |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  alignas(64) float l[16];
  _mm512_store_ps(l, lanes);
  float m = -kInf;
  for (float v : l) m = v > m ? v : m;
  m = softmax_max(x, k, n, m, nans != 0);
  const __m512 top = _mm512_set1_ps(m);
  size_t used = n;
  if (m > -kInf && m < kInf) {
    const __m512 cut = _mm512_set1_ps(kSoftmaxNegligible);
    size_t e = n;
    while (e >= 16 && _mm512_cmp_ps_mask(_mm512_sub_ps(_mm512_loadu_ps(x + e - 16), top), cut, _CMP_LT_OQ) == 0xFFFF)
      e -= 16;
    used = softmax_used(x, n, m, e);
  }
  __m512d acc = _mm512_setzero_pd();  // the eight double lanes
  for (k = 0; k + 16 <= used; k += 16) {
    const __m512 v = exp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(x + k), top));
    _mm512_storeu_ps(y + k, v);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
  }
  if (k + 8 <= used) {
    const __m512 v = exp_f32x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(0xFF, x + k), top));
    _mm512_mask_storeu_ps(y + k, 0xFF, v);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    k += 8;
  }
  alignas(64) double sums[8];
  _mm512_store_pd(sums, acc);
  const float total = softmax_total(x, y, k, used, m, sums);
  const __m512 t = _mm512_set1_ps(total);
  for (k = 0; k < used; k += 16) {
    const __mmask16 mk = mask16(used - k);
    _mm512_mask_storeu_ps(y + k, mk, _mm512_div_ps(_mm512_maskz_loadu_ps(mk, y + k), t));
  }
  std::fill(y + used, y + n, 0.0f);
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
