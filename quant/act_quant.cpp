// Row quantizers (quant/act_quant.h). Plain loops the compiler vectorizes
// at the x86-64-v3 baseline; division (not a reciprocal multiply) so the
// rounding is that of x/scale, as QuantizeLinear defines it.
#include "quant/act_quant.h"

#include <cfloat>
#include <cmath>
#include <cstring>

namespace onebit {

namespace {

// NaN goes to lo, so the int8 conversion after it is always defined: a NaN in
// a row, or an infinity (which makes its scale infinite and x/scale NaN),
// quantizes to the low end. The result is then defined, not meaningful.
inline float clampf(float v, float lo, float hi) { return v >= lo ? (v > hi ? hi : v) : lo; }

}  // namespace

QD8Params quantize_qd8(const float* x, size_t n, int8_t* q) {
  float lo = 0.0f, hi = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  const float scale = (hi - lo) / 255.0f;
  if (!(scale >= FLT_MIN)) {
    if (n != 0) std::memset(q, 0, n);
    return {0, 0.0f};
  }
  const float zp = clampf(std::nearbyint(-128.0f - lo / scale), -128.0f, 127.0f);
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clampf(std::nearbyint(x[i] / scale) + zp, -128.0f, 127.0f));
  return {static_cast<int32_t>(zp), scale};
}

float quantize_symmetric(const float* x, size_t n, int8_t* q) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
  const float scale = amax / 127.0f;
  if (!(scale >= FLT_MIN)) {
    if (n != 0) std::memset(q, 0, n);
    return 0.0f;
  }
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clampf(std::nearbyint(x[i] / scale), -127.0f, 127.0f));
  return scale;
}

}  // namespace onebit
