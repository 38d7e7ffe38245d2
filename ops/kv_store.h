// One layer's KV cache kept across runs (KvAppend, GroupQueryAttention with
// the cache kept in the session): [kvh][capacity][d] elements, float32 or
// float16 (KernelOptions::kv_dtype), grown by half again when full, counted
// against the memory budget. Rows are written as float32 and narrowed here.
// A caller may take positions back by passing a shorter past (continue_at).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "base/dtype.h"
#include "base/error.h"
#include "base/memory_budget.h"
#include "base/sizes.h"
#include "ops/kv_gemm.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

class KvStore {
 public:
  explicit KvStore(DType dtype = DType::F32) : dtype_(dtype) {
    if (dtype != DType::F32 && dtype != DType::F16)
      fail("a KV cache of {} is not supported (float32 or float16)", dtype_name(dtype));
  }

  DType dtype() const { return dtype_; }
  void* data() const { return data_.get(); }
  // The allocation, for tensors that view the cache and keep it alive.
  const std::shared_ptr<void>& owner() const { return data_; }
  int64_t capacity() const { return capacity_; }
  int64_t length = 0;  // positions held

  // Head h's rows (capacity of them, `length` written).
  KvRows head(int64_t h) const { return {at(h, 0), dtype_}; }

  // rows × d floats into head h from position `pos` (within capacity).
  void put(int64_t h, int64_t pos, const float* src, int64_t rows) {
    const size_t n = static_cast<size_t>(rows * d_);
    if (dtype_ == DType::F32) std::memcpy(at(h, pos), src, n * sizeof(float));
    else kv_config().narrow(n, src, static_cast<uint16_t*>(at(h, pos)));
  }

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
    const size_t elem = elem_bytes();
    const size_t want = checked_mul_u64(static_cast<uint64_t>(kvh) * static_cast<uint64_t>(d),
                                        static_cast<uint64_t>(capacity) * elem, "the KV state");
    const size_t bytes = (want + 63) / 64 * 64;
    void* p = budgeted_alloc(bytes, 64, fmt::format("growing the KV state to {} positions", capacity));
    std::shared_ptr<void> fresh(p, [bytes](void* q) { budgeted_free(q, bytes, 64); });
    const std::shared_ptr<void> old = std::move(data_);
    const int64_t old_capacity = capacity_;
    data_ = std::move(fresh);
    capacity_ = capacity;
    for (int64_t h = 0; h < kvh && length > 0; ++h)
      std::memcpy(at(h, 0), static_cast<const unsigned char*>(old.get()) + static_cast<size_t>(h * old_capacity * d) * elem,
                  static_cast<size_t>(length * d) * elem);
  }

 private:
  size_t elem_bytes() const { return dtype_bytes(dtype_, 1); }
  void* at(int64_t h, int64_t pos) const {
    return static_cast<unsigned char*>(data_.get()) + static_cast<size_t>((h * capacity_ + pos) * d_) * elem_bytes();
  }

  DType dtype_;
  std::shared_ptr<void> data_;
  int64_t kvh_ = 0, d_ = 0, capacity_ = 0;
};

}  // namespace onebit
