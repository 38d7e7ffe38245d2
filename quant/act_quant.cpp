// Row quantizers (quant/act_quant.h). Plain loops the compiler vectorizes
// at the x86-64-v3 baseline; division (not a reciprocal multiply) so the
// rounding is that of x/scale, as QuantizeLinear defines it. The row's
// extremes are found in kLanes independent running extremes combined at the
// end: one running value is a chain of dependent compares the compiler may
// not split (it would reorder float operations), and it was the scalar half
// of these functions. The extreme is the same: `>` and `<` never pick a NaN
// and never replace a zero with a zero of the other sign, so every order of
// the compares ends on the same value.
#include "quant/act_quant.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// NaN goes to lo, so the int8 conversion after it is always defined: a NaN in
// a row, or an infinity (which makes its scale infinite and x/scale NaN),
// quantizes to the low end. The result is then defined, not meaningful.
inline float clampf(float v, float lo, float hi) { return v >= lo ? (v > hi ? hi : v) : lo; }

constexpr size_t kLanes = 16;

// min(0, x...) and max(0, x...) as `x < lo ? x : lo` and `x > hi ? x : hi`.
void row_extremes(const float* x, size_t n, float& lo_out, float& hi_out) {
  float lo[kLanes] = {}, hi[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t l = 0; l < kLanes; ++l) {
      lo[l] = x[i + l] < lo[l] ? x[i + l] : lo[l];
      hi[l] = x[i + l] > hi[l] ? x[i + l] : hi[l];
    }
  for (size_t l = 0; i < n; ++i, ++l) {
    lo[l] = x[i] < lo[l] ? x[i] : lo[l];
    hi[l] = x[i] > hi[l] ? x[i] : hi[l];
  }
  lo_out = hi_out = 0.0f;
  for (size_t l = 0; l < kLanes; ++l) {
    lo_out = lo[l] < lo_out ? lo[l] : lo_out;
    hi_out = hi[l] > hi_out ? hi[l] : hi_out;
  }
}

// max(0, |x|...) as `|x| > m ? |x| : m`.
float row_absmax(const float* x, size_t n) {
  float m[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t l = 0; l < kLanes; ++l) m[l] = std::fabs(x[i + l]) > m[l] ? std::fabs(x[i + l]) : m[l];
  for (size_t l = 0; i < n; ++i, ++l) m[l] = std::fabs(x[i]) > m[l] ? std::fabs(x[i]) : m[l];
  float amax = 0.0f;
  for (size_t l = 0; l < kLanes; ++l) amax = m[l] > amax ? m[l] : amax;
  return amax;
}

}  // namespace

QD8Params quantize_qd8(const float* x, size_t n, int8_t* q) {
  float lo = 0.0f, hi = 0.0f;
  row_extremes(x, n, lo, hi);
  const float scale = (hi - lo) / 255.0f;
  if (!(scale >= FLT_MIN)) {
    if (n != 0) std::memset(q, 0, n);
    return {0, 0.0f};
  }
  const float zp = clampf(std::nearbyint(-128.0f - lo / scale), -128.0f, 127.0f);
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clampf(std::nearbyint(x[i] / scale) + zp, -128.0f, 127.0f));
  return {static_cast<int32_t>(zp), scale};
}

void quantize_symmetric_blocks(const float* x, size_t n, size_t kb, int8_t* q, float* scale, int32_t* sum) {
  vec_math_config().qs8_blocks(n, kb, x, q, scale, sum);
}

float quantize_symmetric(const float* x, size_t n, int8_t* q) {
  const float scale = row_absmax(x, n) / 127.0f;
  if (!(scale >= FLT_MIN)) {
    if (n != 0) std::memset(q, 0, n);
    return 0.0f;
  }
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clampf(std::nearbyint(x[i] / scale), -127.0f, 127.0f));
  return scale;
}

}  // namespace onebit
