// The process's budget for the buffers it allocates (`--max-memory BYTES`;
// default: the machine's physical memory). Tensors, packed weights, the
// session's arena and its output buffers reserve their bytes here before
// they are allocated and give them back when freed, so a model that asks
// for more than the budget — a huge ConstantOfShape, an Expand to 2^40
// elements — is an Error naming what it was for, before any page is
// touched. File mappings do not count (the kernel pages them in and out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace onebit {

uint64_t physical_memory_bytes();

void set_memory_limit(uint64_t bytes);
uint64_t memory_limit();
uint64_t memory_in_use();

// Counts `bytes` against the budget, or throws an Error naming `what`, the
// bytes, the budget and what is in use.
void memory_reserve(uint64_t bytes, std::string_view what);
void memory_release(uint64_t bytes);

// "1.5 GiB", "512 MiB", "12 bytes".
std::string format_bytes(uint64_t bytes);
// "24G", "512MiB", "1000000": the --max-memory syntax (K, M, G, T with an
// optional i/iB/B; powers of 1024). Nothing on a malformed value.
bool parse_bytes(std::string_view text, uint64_t& out);

// `bytes` rounded up to `align` (a power of two, at least 64 bytes in all),
// counted against the budget; never null: an Error instead, naming `what`.
void* budgeted_alloc(size_t bytes, size_t align, std::string_view what);
// Frees what budgeted_alloc returned for the same `bytes` and `align`.
void budgeted_free(void* p, size_t bytes, size_t align);
// Zeroed pages straight from the kernel for a large, long-lived buffer
// (packed weights): `bytes` rounded up to the 4 KiB page, the start aligned
// to `align` (a power-of-two multiple of 4 KiB), every page allocated up
// front (MAP_POPULATE), so the packer's first writes take no page faults
// and nothing zeroes the buffer a second time. Measured on the 0.6B model,
// one thread: float32 load 1.30–1.47 s with a fault per page, 1.05–1.22 s
// populated. (Advising the range for transparent huge pages as well made
// the 4-bit load vary 0.40–0.78 s against 0.45–0.55 s without, and decode
// did not move outside the noise, so it is not done here.) Counted against
// the budget like budgeted_alloc; freed with budgeted_pages_free(p, bytes).
void* budgeted_pages(size_t bytes, size_t align, std::string_view what);
void budgeted_pages_free(void* p, size_t bytes);
// Pages for a buffer streamed again and again in short runs (the KV cache:
// every decode step reads each head's rows, a layer at a time, between the
// layers' weights): `bytes` rounded up to the 4 KiB page, the start aligned
// to kHugePageBytes, advised for transparent huge pages before the first
// touch and populated then, so every whole 2 MiB of it can be a huge page
// (the kernel's choice; the tail past the last whole one is 4 KiB pages).
// Each head's stream then starts on a page the TLB can keep: an int8
// cache's Q·Kᵀ read 9.1 instead of 5.5 GB/s cold (bench_attention,
// BM_kv_layers). Freed with budgeted_pages_free(p, bytes).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
void* budgeted_huge_pages(size_t bytes, std::string_view what);
// The same owned by a shared_ptr (tensors, arenas, output buffers).
std::shared_ptr<void> budgeted_shared(size_t bytes, size_t align, std::string_view what);

// A reservation released when it goes out of scope.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  MemoryReservation(uint64_t bytes, std::string_view what) : bytes_(bytes) { memory_reserve(bytes, what); }
  ~MemoryReservation() { memory_release(bytes_); }
  MemoryReservation(MemoryReservation&& o) noexcept : bytes_(o.bytes_) { o.bytes_ = 0; }
  MemoryReservation& operator=(MemoryReservation&& o) noexcept {
    if (this != &o) {
      memory_release(bytes_);
      bytes_ = o.bytes_;
      o.bytes_ = 0;
    }
    return *this;
  }
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_ = 0;
};

}  // namespace onebit
