// One layer's KV cache kept across runs (KvAppend, GroupQueryAttention with
// the cache kept in the session): [kvh][capacity][d] floats, grown by half
// again when full, counted against the memory budget. A caller may take
// positions back by passing a shorter past (continue_at).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "base/memory_budget.h"
#include "base/sizes.h"

namespace onebit {

// One layer's cache kept across runs: [kvh][capacity][d] floats.
class KvStore {
 public:
  float* data() const { return data_.get(); }
  // The allocation, for tensors that view the cache and keep it alive.
  const std::shared_ptr<float>& owner() const { return data_; }
  int64_t capacity() const { return capacity_; }
  int64_t length = 0;  // positions held

  // A run whose past is `past` positions: the sequence continues from there.
  // Fewer than held takes the rest back (positions a caller rejected, as
  // lookup decoding's unaccepted drafts; 0 starts a new sequence); more than
  // held is an error, since those positions were never written.
  void continue_at(int64_t past) {
    if (past > length)
      fail("the KV state holds {} positions but the past is {}: it follows one sequence, which continues from at "
           "most the positions it holds",
           length, past);
    if (past >= 0) length = past;
  }

  // Room for `positions` per head, keeping what is held; a new head layout
  // (kvh, d) starts a new sequence.
  void reserve(int64_t kvh, int64_t d, int64_t positions) {
    if (kvh != kvh_ || d != d_) {
      kvh_ = kvh;
      d_ = d;
      length = capacity_ = 0;
      data_.reset();
    }
    if (positions <= capacity_) return;
    const int64_t capacity = std::max(positions, capacity_ + capacity_ / 2);
    const size_t want = checked_mul_u64(static_cast<uint64_t>(kvh) * static_cast<uint64_t>(d),
                                        static_cast<uint64_t>(capacity) * sizeof(float), "the KV state");
    const size_t bytes = (want + 63) / 64 * 64;
    float* p = static_cast<float*>(
        budgeted_alloc(bytes, 64, fmt::format("growing the KV state to {} positions", capacity)));
    std::shared_ptr<float> fresh(p, [bytes](float* q) { budgeted_free(q, bytes, 64); });
    for (int64_t h = 0; h < kvh && length > 0; ++h)
      std::memcpy(p + h * capacity * d, data_.get() + h * capacity_ * d, static_cast<size_t>(length * d) * sizeof(float));
    data_ = std::move(fresh);
    capacity_ = capacity;
  }

 private:
  std::shared_ptr<float> data_;
  int64_t kvh_ = 0, d_ = 0, capacity_ = 0;
};

}  // namespace onebit
