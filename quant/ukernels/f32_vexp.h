// Elementary functions for loops where a model spends real time in them
// (SiLU's Sigmoid runs on every MLP activation of every step): eight lanes
// of AVX2 (the baseline ISA) at a time, and a scalar twin doing the same
// float operations in the same order for the tail, so every element gets
// the same result wherever it falls.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace onebit {

// e^x for float32, within 1 ulp of the correctly rounded value wherever the
// result is a normal float; the argument is clamped to [-87.3, 88.7] (e^-inf
// gives ~1.2e-38, e^+inf ~3.4e38) and NaN stays NaN. Cody–Waite reduction
// x = n·ln2 + r with |r| <= ln2/2, the Cephes degree-6 polynomial for e^r,
// then 2^n from exponent bits in two halves (n reaches 128).
namespace exp_detail {
inline constexpr float kLo = -87.3365f, kHi = 88.7228f, kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_detail

inline float exp_f32(float x) {
  using namespace exp_detail;
  float v = x > kLo ? x : kLo;  // as maxps/minps: a NaN becomes kLo
  v = v < kHi ? v : kHi;
  const float n = std::nearbyint(v * kLog2e);
  float r = v - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = p * r + kP[i];
  const float er = p * (r * r) + r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n), half = ni >> 1;
  const int32_t bits_a = (half + 127) << 23, bits_b = (ni - half + 127) << 23;
  float a, b;
  std::memcpy(&a, &bits_a, sizeof a);
  std::memcpy(&b, &bits_b, sizeof b);
  const float y = er * a * b;
  return x == x ? y : x;
}

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
  const __m256 y = _mm256_mul_ps(_mm256_mul_ps(er, a), b);
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// 1 / (1 + e^-x) over n floats.
inline void sigmoid_f32(const float* x, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_f32x8(_mm256_sub_ps(zero, _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(y + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = 1.0f / (1.0f + exp_f32(0.0f - x[i]));
}

}  // namespace onebit
