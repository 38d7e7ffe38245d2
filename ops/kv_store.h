// One layer's KV cache kept across runs (KvAppend, GroupQueryAttention with
// the cache kept in the session): [kvh][capacity][d] elements, float32 or
// float16 (KernelOptions::kv_dtype), grown by half again when full, counted
// against the memory budget (an empty one sized as asked). Rows are written
// as float32 and narrowed here.
// int8 (--kv-dtype q8): each head [capacity][d] codes, then [capacity]
// float32 scales, one per position: scale = max|x| / 127 over the row, code
// = x · (127 / max|x|) rounded to nearest even and clamped to ±127 (a NaN
// clamps to -127; an all-zero row has scale 0); a code stands for
// q8_value(scale, code) (quant/ukernels/kv_ukernels.h). d a multiple of 4.
// A caller may take positions back by passing a shorter past (continue_at).
#pragma once

#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "base/dtype.h"
#include "base/error.h"
#include "base/memory_budget.h"
#include "base/sizes.h"
#include "ops/kv_gemm.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

// KV states allocated in this process so far (each store's first
// allocation and every regrowth): for tests and traces.
int64_t kv_state_allocations();

void count_kv_state_allocation();

class KvStore {
 public:
  // Undefined: float32 (a Session resolves "the model's own" before it
  // creates kernels; SessionOptions' KernelOptions::kv_dtype).
  explicit KvStore(DType dtype = DType::F32) : dtype_(dtype == DType::Undefined ? DType::F32 : dtype) {
    if (dtype_ != DType::F32 && dtype_ != DType::F16 && dtype_ != DType::I8)
      fail("a KV cache of {} is not supported (float32, float16 or int8)", dtype_name(dtype));
  }

  DType dtype() const { return dtype_; }
  void* data() const { return data_.get(); }
  // The allocation, for tensors that view the cache and keep it alive.
  const std::shared_ptr<void>& owner() const { return data_; }
  int64_t capacity() const { return capacity_; }
  int64_t length = 0;  // positions held

  // Head h's rows (capacity of them, `length` written).
  KvRows head(int64_t h) const { return {at(h, 0), dtype_, dtype_ == DType::I8 ? scales(h) : nullptr}; }
  // Elements (int8: bytes) from one head to the next.
  int64_t head_stride() const { return capacity_ * row_elems(); }

  // rows × d floats into head h from position `pos` (within capacity).
  void put(int64_t h, int64_t pos, const float* src, int64_t rows) {
    const size_t n = static_cast<size_t>(rows * d_);
    if (dtype_ == DType::F32) std::memcpy(at(h, pos), src, n * sizeof(float));
    else if (dtype_ == DType::F16) kv_config().narrow(n, src, static_cast<uint16_t*>(at(h, pos)));
    else
      for (int64_t r = 0; r < rows; ++r)
        quantize_row(src + r * d_, static_cast<int8_t*>(at(h, pos + r)), scales(h) + pos + r);
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
    if (dtype_ == DType::I8 && (d <= 0 || d % 4 != 0))
      fail("an int8 KV cache (--kv-dtype q8) needs a head size that is a multiple of 4, got {}", d);
    if (kvh != kvh_ || d != d_) {
      kvh_ = kvh;
      d_ = d;
      length = capacity_ = 0;
      data_.reset();
    }
    if (positions <= capacity_) return;
    // A store that holds a sequence grows by half again (a decode loop
    // creeping a position a step settles); an empty one is sized as asked
    // (planning reserves the prompt, then the last step, before any run).
    const int64_t capacity = length > 0 ? std::max(positions, capacity_ + capacity_ / 2) : positions;
    const size_t elem = elem_bytes();
    const size_t want = checked_mul_u64(static_cast<uint64_t>(kvh) * static_cast<uint64_t>(row_elems()),
                                        static_cast<uint64_t>(capacity) * elem, "the KV state");
    const std::string what = fmt::format("growing the KV state to {} positions", capacity);
    // Pages of its own, populated now: a decode step's append would
    // otherwise fault a page in every few steps per head (KvAppend 0.24 ->
    // 0.13 ms a step, Qwen3 shape, 2 threads, 32 of past). From 1 MiB on
    // huge pages (base/memory_budget.h): one whole huge page under 2 MiB,
    // else the 4 KiB pages that hold it (the whole 2 MiB inside them huge).
    // The rounding up becomes room.
    const bool huge = want >= kHugePageBytes / 2;
    const size_t page = huge && want < kHugePageBytes ? kHugePageBytes : 4096;
    const size_t bytes = (std::max<size_t>(want, 1) + page - 1) / page * page;
    std::shared_ptr<void> fresh(huge ? budgeted_huge_pages(bytes, what) : budgeted_pages(bytes, 4096, what),
                                [bytes](void* q) { budgeted_pages_free(q, bytes); });
    count_kv_state_allocation();
    const int64_t room = static_cast<int64_t>(bytes / (static_cast<size_t>(kvh * row_elems()) * elem));
    const std::shared_ptr<void> old = std::move(data_);
    const int64_t old_capacity = capacity_;
    data_ = std::move(fresh);
    capacity_ = room;
    const auto* from = static_cast<const unsigned char*>(old.get());
    for (int64_t h = 0; h < kvh && length > 0; ++h) {
      const unsigned char* head = from + static_cast<size_t>(h * old_capacity * row_elems()) * elem;
      std::memcpy(at(h, 0), head, static_cast<size_t>(length * d) * elem);
      if (dtype_ == DType::I8)
        std::memcpy(scales(h), head + static_cast<size_t>(old_capacity * d), static_cast<size_t>(length) * sizeof(float));
    }
  }

 private:
  size_t elem_bytes() const { return dtype_bytes(dtype_, 1); }
  // A position's elements in a head: int8 rows carry a 4-byte scale too.
  int64_t row_elems() const { return dtype_ == DType::I8 ? d_ + 4 : d_; }
  void* at(int64_t h, int64_t pos) const {
    return static_cast<unsigned char*>(data_.get()) +
           static_cast<size_t>(h * head_stride() + pos * d_) * elem_bytes();
  }
  float* scales(int64_t h) const {
    return reinterpret_cast<float*>(static_cast<unsigned char*>(data_.get()) +
                                    static_cast<size_t>(h * head_stride() + capacity_ * d_));
  }
  // Eight lanes at a time (the baseline ISA's AVX2), the tail scalar; both
  // are what the contract above says: max|x| ignoring a NaN (maxps returns
  // its second operand, the running max, for a NaN), x · inv rounded to
  // nearest even (the default mode), the clamp taking a NaN to -127.
  void quantize_row(const float* x, int8_t* codes, float* scale) const {
    const size_t d = static_cast<size_t>(d_);
    size_t i = 0;
    float amax = 0;
    if (d >= 8) {
      const __m256 sign = _mm256_set1_ps(-0.0f);
      __m256 m = _mm256_setzero_ps();
      for (; i + 8 <= d; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, m);
      for (const float l : lanes) amax = l > amax ? l : amax;
    }
    for (; i < d; ++i) {
      const float a = std::fabs(x[i]);
      amax = a > amax ? a : amax;
    }
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    i = 0;
    const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (; i + 8 <= d; i += 8) {
      const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i c = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));  // exact: integral
      const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packs_epi16(c16, c16));
    }
    for (; i < d; ++i) {
      const float r = std::nearbyint(x[i] * inv);
      const float l = r > -127.0f ? r : -127.0f;
      codes[i] = static_cast<int8_t>(l < 127.0f ? l : 127.0f);
    }
  }

  DType dtype_;
  std::shared_ptr<void> data_;
  int64_t kvh_ = 0, d_ = 0, capacity_ = 0;
};

}  // namespace onebit
