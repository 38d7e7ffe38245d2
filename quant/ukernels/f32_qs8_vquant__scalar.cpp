// The reference: each block as quant/act_quant.h's quantize_symmetric
// quantizes it (the definition the header restates), then its codes' sum.
#include "quant/act_quant.h"
#include "quant/ukernels/f32_qs8_vquant_ukernels.h"

namespace onebit {

void f32_qs8_vquant_blocks_ukernel__scalar(size_t n, size_t kb, const float* x, int8_t* q, float* scale,
                                           int32_t* sum) {
  for (size_t b = 0, k0 = 0; k0 < n; ++b, k0 += kb) {
    const size_t len = n - k0 < kb ? n - k0 : kb;
    scale[b] = quantize_symmetric(x + k0, len, q + k0);
    int32_t total = 0;
    for (size_t i = 0; i < len; ++i) total += q[k0 + i];
    sum[b] = total;
  }
}

}  // namespace onebit
