// Scalar A8W8 family: the twin every vector kernel is tested against, and the
// one epilogue (q8_store_scalar) that vector tails share. Layout 8 columns ×
// 4 k per 32-byte group (quant/q8_ukernels.h).
#include <type_traits>

#include "quant/ukernels/q8_ukernels.h"

namespace onebit {

void q8_store_scalar(uint32_t raw, size_t m, size_t n, const Q8Epilogue& ep, void* c, size_t index) {
  uint32_t acc = raw - static_cast<uint32_t>(ep.c1[n]) * static_cast<uint32_t>(ep.row_sum[m]);
  if (ep.cz) acc -= static_cast<uint32_t>(ep.zx[m * ep.zx_step]) * static_cast<uint32_t>(ep.cz[n]);
  const double s = double(ep.sx[m * ep.sx_step]) * ep.sw[n];
  const int32_t exact = static_cast<int32_t>(acc);
  switch (ep.out) {
    case Q8Out::kF32: static_cast<float*>(c)[index] = q8_to_f32(exact, s); break;
    case Q8Out::kS8: static_cast<int8_t*>(c)[index] = static_cast<int8_t>(q8_requantize(exact, s, ep.rq)); break;
    case Q8Out::kU8: static_cast<uint8_t*>(c)[index] = static_cast<uint8_t>(q8_requantize(exact, s, ep.rq)); break;
  }
}

namespace {

constexpr size_t NR = kQ8ScalarNR, KR = kQ8ScalarKR;

// p is unsigned when the activations are signed (see the operand domain).
template <bool XS>
inline int32_t weight(uint8_t p) {
  return XS ? int32_t(p) : int32_t(static_cast<int8_t>(p));
}

template <bool XS>
void rows(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w, size_t m0, size_t n0,
          const Q8Epilogue& ep, void* c, size_t ldc) {
  using X = std::conditional_t<XS, int8_t, uint8_t>;
  const X* x = static_cast<const X*>(a);
  uint32_t acc[kQ8ScalarMR][NR] = {};
  for (size_t kk = 0; kk < k; ++kk) {
    const uint8_t* g = w + (kk / KR) * NR * KR + kk % KR;
    for (size_t r = 0; r < mr; ++r) {
      const int32_t xv = x[r * lda + kk];
      for (size_t j = 0; j < NR; ++j) acc[r][j] += static_cast<uint32_t>(xv * weight<XS>(g[j * KR]));
    }
  }
  for (size_t r = 0; r < mr; ++r)
    for (size_t j = 0; j < nc; ++j) q8_store_scalar(acc[r][j], m0 + r, n0 + j, ep, c, r * ldc + j);
}

}  // namespace

template <bool XS>
void q8_gemm_ukernel_2x8c4__scalar(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                                   size_t /*panel_stride*/, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                                   size_t ldc) {
  rows<XS>(mr, nc, k, a, lda, w, m0, n0, ep, c, ldc);
}

template <bool XS>
void q8_gemv_ukernel_1x8c4__scalar(size_t nc, size_t k, const void* a, const uint8_t* w, size_t /*panel_stride*/,
                                   size_t m0, size_t n0, const Q8Epilogue& ep, void* c) {
  rows<XS>(1, nc, k, a, 0, w, m0, n0, ep, c, 0);
}

template void q8_gemm_ukernel_2x8c4__scalar<false>(size_t, size_t, size_t, const void*, size_t, const uint8_t*,
                                                   size_t, size_t, size_t, const Q8Epilogue&, void*, size_t);
template void q8_gemm_ukernel_2x8c4__scalar<true>(size_t, size_t, size_t, const void*, size_t, const uint8_t*,
                                                  size_t, size_t, size_t, const Q8Epilogue&, void*, size_t);
template void q8_gemv_ukernel_1x8c4__scalar<false>(size_t, size_t, const void*, const uint8_t*, size_t, size_t,
                                                   size_t, const Q8Epilogue&, void*);
template void q8_gemv_ukernel_1x8c4__scalar<true>(size_t, size_t, const void*, const uint8_t*, size_t, size_t,
                                                  size_t, const Q8Epilogue&, void*);

}  // namespace onebit
