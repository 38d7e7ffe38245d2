#include "quant/ukernels/f32_vargmax_ukernels.h"

namespace onebit {

size_t f32_vargmax_ukernel__scalar(size_t n, const float* x) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace onebit
