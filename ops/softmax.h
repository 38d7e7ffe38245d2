// One float32 Softmax row, exactly as the Softmax kernel computes each row
// along its last axis (ops/softmax.cpp): for a fused node whose output must
// equal the Softmax it replaces bit for bit. x may be y.
#pragma once

#include <cstdint>

namespace onebit {

void softmax_row(const float* x, float* y, int64_t n);

// The row kernel's lanes: a float32 row's max and sum run in groups of this
// many entries from its start, then one by one.
inline constexpr int64_t kSoftmaxLanes = 8;

// How much of a float32 row softmax_row must see when every entry from
// `kept` on lies more than 104 below the row's maximum and none is NaN (a
// causal mask's left-out keys): `kept` rounded up to whole groups of lanes,
// at most n. softmax_row over that prefix writes the whole row's first
// entries bit for bit (the maximum is among them, the entries after have
// exp exactly 0 and were left out of the sum anyway); the whole row's
// entries after the prefix are 0.
inline int64_t softmax_prefix(int64_t kept, int64_t n) {
  const int64_t p = (kept + kSoftmaxLanes - 1) / kSoftmaxLanes * kSoftmaxLanes;
  return p < n ? p : n;
}

}  // namespace onebit
