// Copy of an N-d strided view into a contiguous buffer: the one loop behind
// Transpose, Slice, Expand and Tile. Dims are collapsed where the view is
// contiguous, and the innermost run is a memcpy when its stride is 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/tensor.h"

namespace onebit {

class ThreadPool;

struct StridedView {
  const uint8_t* base;           // element (0,...,0) of the view
  Shape shape;                   // view (and output) shape
  std::vector<int64_t> strides;  // in elements, may be 0 or negative
};

void strided_copy(const StridedView& src, void* dst, size_t elem_bytes, ThreadPool& pool);

// Row-major strides of a contiguous tensor of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);

}  // namespace onebit
