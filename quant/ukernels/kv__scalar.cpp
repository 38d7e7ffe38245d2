// The reference KV microkernels: plain loops over base/dtype.h's conversions
// and one fmaf per multiply-add, in the vector kernels' order (eight lane
// chains and their fixed sum for a score; one chain for an output).
#include <cmath>

#include "base/dtype.h"
#include "quant/ukernels/kv_ukernels.h"

namespace onebit {

namespace {

float wide(float x, const float*, size_t) { return x; }
float wide(uint16_t h, const float*, size_t) { return half_to_float(h); }
float wide(int8_t c, const float* scales, size_t row) { return q8_value(scales[row], c); }

// scales: an int8 cache's per-row scales (unused for float32 and float16).
template <class K>
void qk(size_t m, size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk, float* s, size_t lds,
        const float* scales = nullptr) {
  for (size_t r = 0; r < m; ++r)
    for (size_t j = 0; j < t; ++j) {
      float lane[8] = {};
      for (size_t i = 0; i < d; i += 8)
        for (size_t l = 0; l < 8; ++l) {
          const bool in = i + l < d;  // past d: the zeros a masked load gives
          lane[l] = std::fma(in ? q[r * ldq + i + l] : 0.0f, in ? wide(k[j * ldk + i + l], scales, j) : 0.0f, lane[l]);
        }
      s[r * lds + j] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
}

template <class V>
void pv(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
        const float* scales = nullptr) {
  for (size_t r = 0; r < m; ++r)
    for (size_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (size_t j = 0; j < t; ++j) acc = std::fma(p[r * ldp + j], wide(v[j * ldv + c], scales, j), acc);
      y[r * ldy + c] = acc;
    }
}

}  // namespace

void f32_f16_vscaleadd_ukernel__scalar(size_t n, float* y, float scale, const uint16_t* mask) {
  const auto h = [](float v) { return half_to_float(float_to_half(v)); };
  for (size_t i = 0; i < n; ++i) y[i] = h(h(h(y[i]) * scale) + half_to_float(mask[i]));
}

void f16_f32_vcvt_ukernel__scalar(size_t n, const uint16_t* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = half_to_float(x[i]);
}

void f32_f16_vcvt_ukernel__scalar(size_t n, const float* x, uint16_t* y) {
  for (size_t i = 0; i < n; ++i) y[i] = float_to_half(x[i]);
}

void f32_qk_ukernel_2x4__scalar(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                                float* s, size_t lds) {
  qk(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_f16_qk_ukernel_2x4__scalar(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                    size_t ldk, float* s, size_t lds) {
  qk(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_pv_ukernel_2x32__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v, size_t ldv,
                                 float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}
void f32_f16_pv_ukernel_2x32__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                     size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}

void f32_q8_qk_ukernel_2x4__scalar(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                   size_t ldk, const float* scales, float* s, size_t lds) {
  qk(m, t, d, q, ldq, k, ldk, s, lds, scales);
}
void f32_q8_pv_ukernel_2x32__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                    size_t ldv, const float* scales, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy, scales);
}

}  // namespace onebit
