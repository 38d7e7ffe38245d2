#include "quant/ukernels/f32_vexp_ukernels.h"

#include <algorithm>
#include <limits>

namespace onebit {

void f32_vexp_ukernel__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = exp_f32(x[i]);
}

void f32_vsigmoid_ukernel__scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + exp_f32(0.0f - x[i]));
}

void f32_vsoftmax_ukernel__scalar(size_t n, const float* x, float* y) {
  constexpr size_t L = kSoftmaxGroup;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float m = softmax_max(x, 0, n, -kInf, false);
  const size_t used = m > -kInf && m < kInf ? softmax_used(x, n, m, n) : n;
  double sums[L] = {};
  size_t k = 0;
  for (; k + L <= used; k += L)
    for (size_t j = 0; j < L; ++j) {
      y[k + j] = exp_f32(x[k + j] - m);
      sums[j] += static_cast<double>(y[k + j]);
    }
  const float total = softmax_total(x, y, k, used, m, sums);
  for (k = 0; k < used; ++k) y[k] = y[k] / total;
  std::fill(y + used, y + n, 0.0f);
}

}  // namespace onebit
