// The reference float16 KV microkernels: plain loops over base/dtype.h's
// conversions and one fmaf per multiply-add.
#include <cmath>

#include "base/dtype.h"
#include "quant/ukernels/f16_kv_ukernels.h"

namespace onebit {

void f16_f32_vcvt_ukernel__scalar(size_t n, const uint16_t* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = half_to_float(x[i]);
}

void f32_f16_vcvt_ukernel__scalar(size_t n, const float* x, uint16_t* y) {
  for (size_t i = 0; i < n; ++i) y[i] = float_to_half(x[i]);
}

void f32_f16_pv_ukernel__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                size_t ldv, float* y, size_t ldy) {
  for (size_t r = 0; r < m; ++r)
    for (size_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (size_t j = 0; j < t; ++j) acc = std::fma(p[r * ldp + j], half_to_float(v[j * ldv + c]), acc);
      y[r * ldy + c] = acc;
    }
}

}  // namespace onebit
