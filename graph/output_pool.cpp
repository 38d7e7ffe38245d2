#include "graph/output_pool.h"

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "base/memory_budget.h"

namespace onebit {

Tensor OutputPool::buffer(size_t slot, DType dtype, const Shape& shape) {
  const size_t bytes = std::max<size_t>(64, dtype_bytes(dtype, numel(shape)));
  auto& buffers = pool_[slot];
  for (Buffer& b : buffers)
    if (b.storage.use_count() == 1 && b.capacity >= bytes) return Tensor(dtype, shape, b.storage.get(), b.storage);
  // Headroom so outputs that grow by a position per step (present) settle.
  const size_t capacity = (bytes + bytes / 4 + 63) / 64 * 64;
  std::shared_ptr<void> storage = budgeted_shared(capacity, 64, what_ + ": an output buffer");
  void* p = storage.get();
  ++allocations_;
  auto victim = std::find_if(buffers.begin(), buffers.end(), [](const Buffer& b) { return b.storage.use_count() == 1; });
  if (victim != buffers.end()) *victim = {storage, capacity};
  else if (buffers.size() < 2) buffers.push_back({storage, capacity});
  return Tensor(dtype, shape, p, storage);
}

}  // namespace onebit
