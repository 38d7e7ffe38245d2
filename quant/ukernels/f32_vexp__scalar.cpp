#include "quant/ukernels/f32_vexp_ukernels.h"

namespace onebit {

void f32_vexp_ukernel__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = exp_f32(x[i]);
}

void f32_vsigmoid_ukernel__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + exp_f32(0.0f - x[i]));
}

}  // namespace onebit
