// A zeroed, 64-byte aligned heap buffer, counted against the memory budget:
// packed weights and their per-column tables live in these (one cache line
// per Q4Group / VNNI weight group). From kPagesFrom bytes on, the buffer is
// pages of its own (budgeted_pages), zeroed by the kernel, so packing a
// large weight does not zero it a second time first.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "base/memory_budget.h"

namespace onebit {

class AlignedBuffer {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kPagesFrom = size_t{1} << 20;

  AlignedBuffer() = default;
  // At least one cache line, so empty problems still get a valid pointer.
  AlignedBuffer(size_t bytes, const char* what) : bytes_(bytes) {
    if (bytes >= kPagesFrom) {
      p_.reset(budgeted_pages(bytes, 4096, what));
    } else {
      p_.reset(budgeted_alloc(bytes, kAlign, what));
      std::memset(p_.get(), 0, bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign);
    }
    p_.get_deleter().bytes = bytes;
  }

  template <class T>
  T* as() const {
    return static_cast<T*>(p_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    Free() noexcept {}
    size_t bytes = 0;
    void operator()(void* p) const {
      if (bytes >= kPagesFrom)
        budgeted_pages_free(p, bytes);
      else
        budgeted_free(p, bytes, kAlign);
    }
  };
  std::unique_ptr<void, Free> p_;
  size_t bytes_ = 0;
};

}  // namespace onebit
