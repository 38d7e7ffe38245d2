// Axis normalisation shared by the ops: negative axes count from the back;
// an axis outside [-rank, rank) is an error naming the attribute and value.
#pragma once

#include <cstdint>

#include "base/error.h"

namespace onebit {

inline int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis") {
  if (axis < -rank || axis >= rank) fail("{} {} is out of range for rank {}", what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace onebit
