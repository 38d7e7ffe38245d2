// Multidirectional (NumPy-style) broadcasting, ONNX "Broadcasting in ONNX".
//
// BroadcastPlan collapses the output into an outer loop and one contiguous
// inner run; each input advances by 0 or 1 element along the inner run and
// by its own strides across the outer dims. Kernels then write their inner
// loop once, specialised for the (stride 1 / stride 0) cases.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor.h"

namespace onebit {

class ThreadPool;

// Output shape of broadcasting `shapes` together; throws an Error naming the
// two incompatible shapes.
Shape broadcast_shapes(const std::vector<Shape>& shapes);

class BroadcastPlan {
 public:
  BroadcastPlan(const std::vector<Shape>& inputs, const Shape& output);

  int64_t outer() const { return outer_; }  // number of inner runs
  int64_t inner() const { return inner_; }  // elements per run
  // Whether input i advances along the inner run (else it repeats one value).
  bool inner_step(size_t i) const { return inner_step_[i]; }
  // Element offset of input i at the start of outer run `o`.
  int64_t offset(size_t i, int64_t o) const;

 private:
  int64_t outer_ = 1, inner_ = 1;
  std::vector<bool> inner_step_;
  std::vector<int64_t> outer_dims_;              // collapsed outer dims
  std::vector<std::vector<int64_t>> strides_;    // per input, per outer dim
};

}  // namespace onebit
