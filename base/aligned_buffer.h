// A zeroed, 64-byte aligned heap buffer: packed weights and their per-column
// tables live in these (one cache line per Q4Group / VNNI weight group).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/error.h"

namespace onebit {

class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;

  AlignedBuffer() = default;
  // At least one cache line, so empty problems still get a valid pointer.
  AlignedBuffer(size_t bytes, const char* what) : bytes_(bytes) {
    const size_t rounded = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
    p_.reset(std::aligned_alloc(kAlign, rounded));
    if (!p_) fail("out of memory allocating {} bytes for {}", rounded, what);
    std::memset(p_.get(), 0, rounded);
  }

  template <class T>
  T* as() const {
    return static_cast<T*>(p_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> p_;
  size_t bytes_ = 0;
};

}  // namespace onebit
