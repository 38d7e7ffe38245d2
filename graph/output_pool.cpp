#include "graph/output_pool.h"

#include <algorithm>
#include <cstdlib>

#include "base/error.h"

namespace onebit {

Tensor OutputPool::buffer(size_t slot, DType dtype, const Shape& shape) {
  const size_t bytes = std::max<size_t>(64, dtype_bytes(dtype, numel(shape)));
  auto& buffers = pool_[slot];
  for (Buffer& b : buffers)
    if (b.storage.use_count() == 1 && b.capacity >= bytes) return Tensor(dtype, shape, b.storage.get(), b.storage);
  // Headroom so outputs that grow by a position per step (present) settle.
  const size_t capacity = (bytes + bytes / 4 + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, capacity);
  if (!p) fail("{}: out of memory allocating {} bytes for an output", what_, capacity);
  std::shared_ptr<void> storage(p, [](void* q) { std::free(q); });
  ++allocations_;
  auto victim = std::find_if(buffers.begin(), buffers.end(), [](const Buffer& b) { return b.storage.use_count() == 1; });
  if (victim != buffers.end()) *victim = {storage, capacity};
  else if (buffers.size() < 2) buffers.push_back({storage, capacity});
  return Tensor(dtype, shape, p, storage);
}

}  // namespace onebit
