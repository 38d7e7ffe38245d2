#include "graph/memory_plan.h"

#include <iterator>

#include "base/error.h"
#include "base/sizes.h"

namespace onebit {

size_t MemoryPlanner::allocate(size_t bytes) {
  // Each slot is at most 2^48 bytes (base/sizes.h); the arena is held to the
  // same bound, so no offset below can wrap.
  if (bytes > kMaxTensorBytes || top_ > kMaxTensorBytes - bytes - MemoryPlanner::kAlign)
    fail("the run's buffers need more than 2^48 bytes ({} planned, {} more)", top_, bytes);
  bytes = round(bytes);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
  if (best != free_.end()) {
    const size_t at = best->first, size = best->second;
    free_.erase(best);
    if (size > bytes) free_.emplace(at + bytes, size - bytes);
    return at;
  }
  // No hole fits: grow from the top, absorbing a free block that ends there.
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == top_) {
      const size_t at = last->first;
      free_.erase(last);
      top_ = at + bytes;
      return at;
    }
  }
  const size_t at = top_;
  top_ += bytes;
  return at;
}

void MemoryPlanner::release(size_t offset, size_t bytes) {
  bytes = round(bytes);
  auto it = free_.emplace(offset, bytes).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

}  // namespace onebit
