// The reference of the float16-weight family (quant/ukernels/f16w_ukernels.h):
// each product widens the half exactly and accumulates in float, k in order.
#include "base/dtype.h"
#include "quant/ukernels/f16w_ukernels.h"

namespace onebit {

void f32_f16w_gemm_ukernel_4x16__scalar(size_t m, size_t k, const float* a, size_t lda, const uint16_t* b, float* c,
                                        size_t ldc, size_t nc) {
  for (size_t r = 0; r < m; ++r) {
    float acc[kF16wNR] = {};
    for (size_t i = 0; i < k; ++i) {
      const float x = a[r * lda + i];
      for (size_t j = 0; j < kF16wNR; ++j) acc[j] += x * half_to_float(b[i * kF16wNR + j]);
    }
    for (size_t j = 0; j < nc; ++j) c[r * ldc + j] = acc[j];
  }
}

}  // namespace onebit
