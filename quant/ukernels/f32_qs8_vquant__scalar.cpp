// The reference: quant/ukernels/f32_qs8_vquant_ukernels.h, element by
// element.
#include <cfloat>
#include <cmath>

#include "quant/ukernels/f32_qs8_vquant_ukernels.h"

namespace onebit {

void f32_qs8_vquant_blocks_ukernel__scalar(size_t n, size_t kb, const float* x, int8_t* q, float* scale,
                                           int32_t* sum) {
  for (size_t b = 0, k0 = 0; k0 < n; ++b, k0 += kb) {
    const size_t len = n - k0 < kb ? n - k0 : kb;
    const float* xb = x + k0;
    int8_t* qb = q + k0;
    float amax = 0.0f;
    for (size_t i = 0; i < len; ++i) amax = std::fabs(xb[i]) > amax ? std::fabs(xb[i]) : amax;
    const float s = amax / 127.0f;
    int32_t total = 0;
    if (!(s >= FLT_MIN)) {
      for (size_t i = 0; i < len; ++i) qb[i] = 0;
      scale[b] = 0.0f;
      sum[b] = 0;
      continue;
    }
    for (size_t i = 0; i < len; ++i) {
      const float v = std::nearbyint(xb[i] / s);
      const float c = v >= -127.0f ? (v > 127.0f ? 127.0f : v) : -127.0f;  // NaN: -127
      qb[i] = static_cast<int8_t>(c);
      total += qb[i];
    }
    scale[b] = s;
    sum[b] = total;
  }
}

}  // namespace onebit
