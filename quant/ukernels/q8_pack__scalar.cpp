// Scalar A8W8 packing from the [K,N] layout (quant/q8_ukernels.h): one byte
// at a time, the reference the vector packers must equal byte for byte.
#include "quant/ukernels/q8_ukernels.h"

namespace onebit {

namespace {

template <size_t KR>
void pack(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out) {
  for (size_t g = 0; g < groups; ++g, src += KR * ldw, out += nr * KR)
    for (size_t j = 0; j < nr; ++j)
      for (size_t t = 0; t < KR; ++t) out[j * KR + t] = static_cast<uint8_t>(src[t * ldw + j] ^ flip);
}

}  // namespace

void q8_pack_ukernel_c2__scalar(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out) {
  pack<2>(src, ldw, groups, nr, flip, out);
}

void q8_pack_ukernel_c4__scalar(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out) {
  pack<4>(src, ldw, groups, nr, flip, out);
}

}  // namespace onebit
