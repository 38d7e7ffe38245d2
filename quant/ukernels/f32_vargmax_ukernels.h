// Greedy decoding's choice: the index of the largest logit. Picked by
// quant/ukernels/kernel_config.cpp (VecMathConfig::argmax), never by a
// caller. Every family returns what the scalar reference does:
//   the first index i whose x[i] is larger than every x[j] before it stays
//   chosen, i.e. the lowest index of the largest value, comparing with `>`:
//   NaN elements are never chosen, except x[0] when it is NaN (nothing is
//   larger than it); -0 and +0 are equal (the first one wins).
// n >= 1.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

using F32VArgmaxUkernel = size_t (*)(size_t n, const float* x);

size_t f32_vargmax_ukernel__scalar(size_t n, const float* x);
// Two passes over x (a row of logits is in cache): the largest non-NaN value
// with maxps, then the first element equal to it.
size_t f32_vargmax_ukernel__avx2(size_t n, const float* x);

}  // namespace onebit
