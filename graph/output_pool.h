// Buffers for graph outputs, recycled across runs: a caller that drops (or
// hands back) last run's outputs lets the next run reuse their storage, so
// a steady decode loop allocates nothing. Two buffers per output cover a
// caller holding last step's (present fed back as past) while the next
// step fills the other.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace onebit {

class OutputPool {
 public:
  // `outputs` graph outputs; `what` names the model in errors.
  OutputPool(size_t outputs, std::string what) : pool_(outputs), what_(std::move(what)) {}

  // A buffer for graph output `slot`: one nobody holds any more if it is
  // large enough, else a new one with headroom.
  Tensor buffer(size_t slot, DType dtype, const Shape& shape);

  int64_t allocations() const { return allocations_; }  // buffers that could not be recycled

 private:
  struct Buffer {
    std::shared_ptr<void> storage;
    size_t capacity = 0;
  };
  std::vector<std::vector<Buffer>> pool_;  // per graph output
  std::string what_;
  int64_t allocations_ = 0;
};

}  // namespace onebit
