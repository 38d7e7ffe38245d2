// Activation quantizers for the dynamic integer paths: one row (or one
// block of a row) of float32 to int8, at call time.
//
//   QD8 (asymmetric, per row; XNNPACK's xnn_qd8_quantization_params, whose
//   "inv_scale" is this scale): real x ≈ (q − zero_point)·scale with
//     lo = min(0, min x), hi = max(0, max x), scale = (hi − lo)/255,
//     zero_point = clamp(RNE(−128 − lo/scale), −128, 127),
//     q = clamp(RNE(x/scale) + zero_point, −128, 127).
//   Real 0 maps to zero_point exactly, which is what lets a row be padded
//   along K with its own zero point.
//
//   Symmetric (per row or block; dynamic int8 and Q4's int8-block):
//     scale = amax/127, q = clamp(RNE(x/scale), −127, 127).
//
// A row whose scale would be 0 or subnormal (all zeros, or |x| < 2⁻¹²⁶·127)
// gets scale 0 and q = 0 (zero_point 0): its products are then exactly 0
// and no NaN appears. Non-finite inputs are not supported.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

struct QD8Params {
  int32_t zero_point;
  float scale;
};
static_assert(sizeof(QD8Params) == 8, "matches xnn_qd8_quantization_params");

QD8Params quantize_qd8(const float* x, size_t n, int8_t* q);
// Returns the scale.
float quantize_symmetric(const float* x, size_t n, int8_t* q);
// A row of n elements in blocks of kb (the last one shorter when kb does not
// divide n), each as quantize_symmetric quantizes it: scale[b] its scale and
// sum[b] the sum of its codes (VecMathConfig::qs8_blocks; vectorized for
// blocks of 32, Q4's int8-block).
void quantize_symmetric_blocks(const float* x, size_t n, size_t kb, int8_t* q, float* scale, int32_t* sum);

}  // namespace onebit
