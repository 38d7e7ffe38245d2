// Scalar Q4NX family: one output at a time, written as the sequence of
// operations quant/q4_ukernels.h states, so it is the reference the vector
// families must equal bit for bit. Also the decode kernel of the scalar
// config (mr = 1, nc ≤ 16).
#include <cmath>

#include "quant/ukernels/q4_ukernels.h"

namespace onebit {

namespace {

// Code of k in column j of a panel (layout in quant/q4_ukernels.h).
inline int32_t code(const uint8_t* codes, size_t k, size_t j) {
  const uint8_t byte = codes[(k / 8) * sizeof(Q4Group) + j * 4 + (k % 4)];
  return k % 8 < 4 ? byte & 15 : byte >> 4;
}

template <Q4Act A, bool Z>
float output(size_t r, size_t j, const Q4Weights& w, size_t panel, const Q4Acts& a) {
  const Q4Panel pan = q4_panel(w, panel);  // float32 scales: this family has no f16_scales
  const uint8_t *codes = pan.codes, *zero = pan.zero;
  const float* scale = pan.scale;
  const size_t col = panel * 16 + j;
  float y = 0.0f;
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    const int32_t zb = Z ? zero[b * w.scale_step + j] : 8;
    const float sb = scale[b * w.scale_step + j];
    if constexpr (A == Q4Act::kFloat) {
      const float* x = static_cast<const float*>(a.data) + r * a.lda;
      float lo = 0.0f, hi = 0.0f;
      for (size_t k = k0; k < kend; ++k) {
        const float wv = float(code(codes, k, j) - 8);
        if (k % 8 < 4) lo = std::fma(x[k], wv, lo);
        else hi = std::fma(x[k], wv, hi);
      }
      float t = lo + hi;
      if (Z) t = std::fma(-float(zb - 8), a.bsum[r * a.blocks + b], t);
      y = std::fma(t, sb, y);
    } else if constexpr (A == Q4Act::kInt8Row) {
      const uint8_t* x = static_cast<const uint8_t*>(a.data) + r * a.lda;
      int32_t raw = 0;
      for (size_t k = k0; k < kend; ++k) raw += int32_t(x[k]) * (code(codes, k, j) - zb);
      y = std::fma(float(raw), sb, y);
    } else {
      const int8_t* q = static_cast<const int8_t*>(a.data) + r * a.lda;
      int32_t acc = 0;
      for (size_t k = k0; k < kend; ++k) acc += int32_t(q[k]) * (code(codes, k, j) - zb);
      y = std::fma(float(acc), sb * a.scale[r * a.blocks + b], y);
    }
  }
  if constexpr (A == Q4Act::kInt8Row)
    return std::fma(std::fma(-float(a.zero[r]), w.g[col], y), a.scale[r], w.bias[col]);
  return y + w.bias[col];
}

}  // namespace

template <Q4Act A, bool Z>
void q4_gemm_ukernel_4x16c8__scalar(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                    float* c, size_t ldc) {
  for (size_t r = 0; r < mr; ++r)
    for (size_t j = 0; j < nc; ++j) c[r * ldc + j] = output<A, Z>(r, j, w, panel, a);
}

#define INSTANTIATE(A, Z)                                                                                         \
  template void q4_gemm_ukernel_4x16c8__scalar<A, Z>(size_t, size_t, const Q4Weights&, size_t, const Q4Acts&, \
                                                     float*, size_t);
INSTANTIATE(Q4Act::kInt8Row, false)
INSTANTIATE(Q4Act::kInt8Row, true)
INSTANTIATE(Q4Act::kInt8Block, false)
INSTANTIATE(Q4Act::kInt8Block, true)
INSTANTIATE(Q4Act::kFloat, false)
INSTANTIATE(Q4Act::kFloat, true)
#undef INSTANTIATE

}  // namespace onebit
