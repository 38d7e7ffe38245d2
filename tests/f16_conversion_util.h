// The float16 conversion kernels (a widen / narrow pair, as KvConfig and
// VecMathConfig each hold one per ISA) against base/dtype.h's scalar
// conversions, bit for bit:
//   - random floats with specials inside the vector body and the tail
//     (both zeros, 65504 and past it, infinities, NaN, subnormal halves,
//     ties), narrowed and widened back, at lengths around the vector width;
//   - every one of the 65536 halves widened (a NaN stays a NaN: vcvtph2ps
//     quiets a signalling one, the scalar keeps its bits);
//   - every third half's float and its neighbours a few ulps either side
//     (the midpoints between halves among them), and `extra`, narrowed;
//   - every length to 40 at 16 offsets, nothing written past the length.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "base/dtype.h"
#include "quant/ukernels/kv_ukernels.h"
#include "tests/random_util.h"

namespace onebit::test {

inline bool same_f16_widening(float got, float want) {
  return std::isnan(want) ? std::isnan(got) : std::memcmp(&got, &want, sizeof(float)) == 0;
}

inline bool same_f16_narrowing(uint16_t got, uint16_t want) {
  const auto nan = [](uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; };
  return nan(want) ? nan(got) : got == want;
}

inline void check_f16_conversions(F16ToF32Ukernel widen, F32ToF16Ukernel narrow,
                                  const std::vector<float>& extra = {}) {
  std::vector<float> x = randn(1000, 1, 3.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, -65520.0f, 1e6f, 6.1035156e-05f,
                            5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 1e-10f, 1.00048828125f, 1.00146484375f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 3.0e-5f, -4.5e-6f};
  x.insert(x.begin() + 3, std::begin(specials), std::end(specials));  // inside the vector body and the tail
  for (size_t n : {x.size(), size_t{7}, size_t{9}, size_t{0}}) {
    std::vector<uint16_t> h(n, 0xdead), want(n);
    narrow(n, x.data(), h.data());
    for (size_t i = 0; i < n; ++i) want[i] = float_to_half(x[i]);
    CHECK(h == want);
    std::vector<float> y(n, -7.0f), back(n);
    widen(n, h.data(), y.data());
    for (size_t i = 0; i < n; ++i) back[i] = half_to_float(h[i]);
    CHECK((n == 0 || std::memcmp(y.data(), back.data(), n * sizeof(float)) == 0));
  }
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  widen(all.size(), all.data(), wide.data());
  size_t differ = 0;
  for (size_t i = 0; i < all.size(); ++i) differ += !same_f16_widening(wide[i], half_to_float(all[i]));
  CHECK(differ == 0);
  std::vector<float> xs = extra;
  for (size_t i = 0; i < all.size(); i += 3)
    for (int32_t ulps : {-4097, -4096, -1, 1, 4095, 4096}) {
      uint32_t b;
      std::memcpy(&b, &wide[i], 4);
      b = static_cast<uint32_t>(static_cast<int64_t>(b) + ulps);
      float v;
      std::memcpy(&v, &b, 4);
      xs.push_back(v);
    }
  std::vector<uint16_t> got(xs.size());
  narrow(xs.size(), xs.data(), got.data());
  differ = 0;
  for (size_t i = 0; i < xs.size(); ++i) differ += !same_f16_narrowing(got[i], float_to_half(xs[i]));
  CHECK(differ == 0);
  for (size_t n = 0; n <= 40; ++n)
    for (size_t off = 0; off < 16; ++off) {
      std::vector<uint16_t> h(n + 1, 0xdead);
      narrow(n, xs.data() + 5000 + off, h.data());
      for (size_t i = 0; i < n; ++i) REQUIRE(h[i] == float_to_half(xs[5000 + off + i]));
      REQUIRE(h[n] == 0xdead);  // nothing past n written
      std::vector<float> w(n + 1, -7.0f);
      widen(n, all.data() + 15000 + off, w.data());
      for (size_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&w[i], &wide[15000 + off + i], sizeof(float)) == 0);
      REQUIRE(w[n] == -7.0f);
    }
}

}  // namespace onebit::test
