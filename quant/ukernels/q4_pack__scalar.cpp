// Scalar Q4NX packing from the [K,N] nibble layout (quant/q4_ukernels.h):
// one code at a time, the reference the vector packers must equal byte for
// byte.
#include "quant/ukernels/q4_ukernels.h"

namespace onebit {

void q4_pack_ukernel_8x16__scalar(const uint8_t* src, size_t row_bytes, size_t groups, uint8_t flip, Q4Group* out,
                                  int32_t* sums) {
  for (size_t g = 0; g < groups; ++g, src += kQ4GroupK * row_bytes) {
    for (size_t j = 0; j < kQ4NR; ++j) {
      const auto code = [&](size_t q) { return ((src[q * row_bytes + j / 2] >> (4 * (j % 2))) & 15) ^ flip; };
      for (size_t q = 0; q < 4; ++q) {
        const int lo = code(q), hi = code(q + 4);
        out[g].bytes[j * 4 + q] = static_cast<uint8_t>(lo | hi << 4);
        sums[j] += lo + hi;
      }
    }
  }
}

}  // namespace onebit
