// Seeded random test data shared by the kernel tests: the same seed gives
// the same values on every run and machine (std::mt19937 is specified bit
// for bit; the normal distribution is libstdc++'s on every build here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace onebit::test {

// n draws of N(0, scale²).
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace onebit::test
