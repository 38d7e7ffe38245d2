// Eight lanes of exp_f32 (quant/ukernels/f32_vexp_ukernels.h), operation for
// operation, so a lane and the scalar tail agree bit for bit.
#include <immintrin.h>

#include "quant/ukernels/f32_vexp_ukernels.h"

#include <algorithm>
#include <limits>

namespace onebit {

namespace {

inline __m256 exp_f32x8(__m256 x) {
  using namespace exp_detail;
  const __m256 v = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLo)), _mm256_set1_ps(kHi));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(v, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kP[i]));
  const __m256 er = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(er, a), b);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kLo), _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(kHi), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

}  // namespace

void f32_vexp_ukernel__avx2(size_t n, const float* x, float* y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_f32x8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
}

// f32_vexp_ukernels.h's Softmax row: the max eight lanes at a time (maxps
// keeps a lane's running max past a NaN, which unordered compares flag),
// the negligible tail found eight at a time from the end, then one pass of
// exp, store and the eight double lanes' sums, and one of the divide.
void f32_vsoftmax_ukernel__avx2(size_t n, const float* x, float* y) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  __m256 lanes = _mm256_set1_ps(-kInf), nans = _mm256_setzero_ps();
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    lanes = _mm256_max_ps(v, lanes);
    nans = _mm256_or_ps(nans, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, lanes);
  float m = -kInf;
  for (float v : l) m = v > m ? v : m;
  m = softmax_max(x, k, n, m, _mm256_movemask_ps(nans) != 0);
  const __m256 top = _mm256_set1_ps(m);
  size_t used = n;
  if (m > -kInf && m < kInf) {
    const __m256 cut = _mm256_set1_ps(kSoftmaxNegligible);
    size_t e = n;
    while (e >= 8 &&
           _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + e - 8), top), cut, _CMP_LT_OQ)) == 0xff)
      e -= 8;
    used = softmax_used(x, n, m, e);
  }
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // lanes 0-3 and 4-7
  for (k = 0; k + 8 <= used; k += 8) {
    const __m256 v = exp_f32x8(_mm256_sub_ps(_mm256_loadu_ps(x + k), top));
    _mm256_storeu_ps(y + k, v);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double sums[8];
  _mm256_store_pd(sums, lo);
  _mm256_store_pd(sums + 4, hi);
  const float total = softmax_total(x, y, k, used, m, sums);
  const __m256 t = _mm256_set1_ps(total);
  for (k = 0; k + 8 <= used; k += 8) _mm256_storeu_ps(y + k, _mm256_div_ps(_mm256_loadu_ps(y + k), t));
  for (; k < used; ++k) y[k] = y[k] / total;
  std::fill(y + used, y + n, 0.0f);
}

void f32_vsigmoid_ukernel__avx2(size_t n, const float* x, float* y) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_f32x8(_mm256_sub_ps(zero, _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(y + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = 1.0f / (1.0f + exp_f32(0.0f - x[i]));
}

}  // namespace onebit
