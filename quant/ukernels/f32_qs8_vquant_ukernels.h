// Symmetric int8 quantization of a row in blocks (Q4's int8-block
// activations; quant/act_quant.h quantize_symmetric_blocks). Picked by
// quant/ukernels/kernel_config.cpp (VecMathConfig::qs8_blocks). Every family
// gives the scalar reference's scales, codes and sums bit for bit:
//   per block of kb elements (the last one shorter when kb does not divide
//   n): amax = the largest |x| over 0 and the block's elements, compared
//   with `>` (a NaN is never the largest); scale = amax / 127; a scale that
//   is not at least FLT_MIN (all zeros, tiny values, NaN) gives scale 0,
//   codes 0 and sum 0; otherwise code = clamp(RNE(x / scale), -127, 127),
//   a NaN quotient clamping to -127; sum = the codes' sum.
// Rounding is to nearest even (the default rounding mode, which 1bit never
// changes).
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

using F32Qs8BlocksUkernel = void (*)(size_t n, size_t kb, const float* x, int8_t* q, float* scale, int32_t* sum);

void f32_qs8_vquant_blocks_ukernel__scalar(size_t n, size_t kb, const float* x, int8_t* q, float* scale,
                                           int32_t* sum);
// Blocks of 32 in four 8-lane vectors (division, not a reciprocal multiply,
// so each quotient is the scalar one); other block sizes and a short last
// block as the scalar reference.
void f32_qs8_vquant_blocks_ukernel__avx2(size_t n, size_t kb, const float* x, int8_t* q, float* scale,
                                         int32_t* sum);

}  // namespace onebit
