// The scalar argmax's answer in two vector passes. x[0] not NaN: the
// scalar loop ends on the lowest index of the largest non-NaN value (a NaN
// is never larger, and once best holds a number a NaN never replaces it);
// pass one finds that value with maxps, whose second operand (the running
// maximum, never NaN) wins whenever the first is NaN, and pass two the first
// element equal to it (-0 == +0, as `>` sees them). x[0] NaN: the scalar loop
// never moves (nothing compares larger than NaN).
#include <immintrin.h>

#include <cmath>

#include "quant/ukernels/f32_vargmax_ukernels.h"

namespace onebit {

size_t f32_vargmax_ukernel__avx2(size_t n, const float* x) {
  if (std::isnan(x[0])) return 0;
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  float best = lanes[0];
  for (float v : lanes) best = v > best ? v : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;

  const __m256 b = _mm256_set1_ps(best);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), b, _CMP_EQ_OQ));
    if (hit) return j + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hit)));
  }
  for (; j < n; ++j)
    if (x[j] == best) return j;
  return 0;  // not reached: best is one of the elements
}

}  // namespace onebit
