// One float32 Softmax row, exactly as the Softmax kernel computes each row
// along its last axis (ops/softmax.cpp): for a fused node whose output must
// equal the Softmax it replaces bit for bit. x may be y.
#pragma once

#include <cstdint>

namespace onebit {

void softmax_row(const float* x, float* y, int64_t n);

}  // namespace onebit
