// Exact references shared by the integer GEMM tests: floats taken apart
// into integer mantissa and exponent, and rounding done in 128-bit integer
// arithmetic, so no reference result depends on floating-point rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "quant/ukernels/kernel_config.h"

namespace onebit::quant_test {

using i128 = __int128;

struct Fp {  // a positive normal float as mantissa · 2^exp, mantissa < 2^24
  int64_t mant;
  int exp;
};
inline Fp split(float f) {
  int e;
  const double m = std::frexp(double(f), &e);
  return {static_cast<int64_t>(std::ldexp(m, 24)), e - 24};
}

// RNE(num / den), den > 0.
inline i128 div_rne(i128 num, i128 den) {
  i128 q = num / den, r = num % den;
  if (r < 0) {
    q -= 1;
    r += den;
  }
  if (2 * r > den || (2 * r == den && (q & 1))) q += 1;
  return q;
}

// RN32(p · 2^e), exactly.
inline float exact_float(i128 p, int e) {
  if (p == 0) return 0.0f;
  const bool neg = p < 0;
  unsigned __int128 mag = neg ? -p : p;
  int bits = 0;
  for (unsigned __int128 t = mag; t; t >>= 1) ++bits;
  if (bits > 24) {
    const int shift = bits - 24;
    const unsigned __int128 rem = mag & ((unsigned __int128)1 << shift) - 1, half = (unsigned __int128)1 << (shift - 1);
    mag >>= shift;
    if (rem > half || (rem == half && (mag & 1))) ++mag;
    e += shift;
  }
  const float f = std::ldexp(float(static_cast<uint64_t>(mag)), e);
  return neg ? -f : f;
}

// RN32(acc · s_x · s_w), exactly.
inline float ref_f32(int64_t acc, float sx, float sw) {
  const Fp a = split(sx), b = split(sw);
  return exact_float(i128(acc) * a.mant * b.mant, a.exp + b.exp);
}

struct Free {
  void operator()(void* p) const { std::free(p); }
};
// A 64-byte aligned workspace of at least `bytes`.
inline std::unique_ptr<void, Free> workspace(size_t bytes) {
  return std::unique_ptr<void, Free>(std::aligned_alloc(64, (bytes + 64) / 64 * 64));
}

// Every distinct kernel family this machine runs (scalar, avx2, avx512,
// avx512vnni, and amx where the CPU has AMX).
inline std::vector<const Q8GemmConfig*> q8_configs() {
  std::vector<const Q8GemmConfig*> out;
  for (Isa isa : kIsas)
    if (const Q8GemmConfig* c = q8_gemm_config_for(isa))
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}
inline std::vector<const Q4GemmConfig*> q4_configs() {
  std::vector<const Q4GemmConfig*> out;
  for (Isa isa : kIsas)
    if (const Q4GemmConfig* c = q4_gemm_config_for(isa))
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

}  // namespace onebit::quant_test
