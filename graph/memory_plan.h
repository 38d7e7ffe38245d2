// Offsets in one arena for buffers whose lifetimes are known in order: a
// simulated allocator (best fit, neighbours merged on release) whose high
// water mark is the arena size. Planning is O(live buffers) per call.
#pragma once

#include <cstddef>
#include <map>

namespace onebit {

class MemoryPlanner {
 public:
  static constexpr size_t kAlign = 64;

  size_t allocate(size_t bytes);
  void release(size_t offset, size_t bytes);
  size_t high_water() const { return top_; }

 private:
  static size_t round(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  std::map<size_t, size_t> free_;  // offset -> size, non-adjacent
  size_t top_ = 0;
};

}  // namespace onebit
