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
  float m = -kInf;
  bool nan = false;
  for (size_t k = 0; k < n; ++k) {
    m = x[k] > m ? x[k] : m;
    nan |= x[k] != x[k];
  }
  if (nan) m = std::numeric_limits<float>::quiet_NaN();
  size_t used = n;
  if (m > -kInf && m < kInf) {
    size_t e = n;
    while (e > 0 && x[e - 1] - m < kSoftmaxNegligible) --e;
    used = std::min(n, (e + L - 1) / L * L);
  }
  double sums[L] = {};
  double sum = 0;
  size_t k = 0;
  for (; k + L <= used; k += L)
    for (size_t j = 0; j < L; ++j) {
      y[k + j] = exp_f32(x[k + j] - m);
      sums[j] += static_cast<double>(y[k + j]);
    }
  for (; k < used; ++k) {
    y[k] = exp_f32(x[k] - m);
    sum += static_cast<double>(y[k]);
  }
  for (size_t j = 0; j < L; ++j) sum += sums[j];
  const float total = static_cast<float>(sum);
  for (k = 0; k < used; ++k) y[k] = y[k] / total;
  std::fill(y + used, y + n, 0.0f);
}

}  // namespace onebit
