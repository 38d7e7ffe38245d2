// Read-only memory map of a whole file. Shared so tensors viewing it keep it
// mapped for as long as they live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace onebit {

class MappedFile {
 public:
  // Throws onebit::Error naming the path on any failure. An empty file maps
  // to size() == 0 and data() == nullptr.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Whether [p, p + bytes) lies wholly inside [base, base + size): a tensor
// that views a mapping rather than owning a copy (integer compares, so no
// pointer is formed past either end).
inline bool range_inside(const void* p, size_t bytes, const void* base, size_t size) {
  const auto at = reinterpret_cast<uintptr_t>(p), from = reinterpret_cast<uintptr_t>(base);
  return p && base && at >= from && at - from <= size && bytes <= size - (at - from);
}

// Maps the pages of [p, p + bytes) into this process now (MADV_POPULATE_READ,
// Linux 5.14 and later; a no-op where it is missing or fails): a weight the
// kernels read in place takes its page faults at load, not in the first
// prefill. 0.06 s for the 2.4 GB of the 0.6B model's file from the page cache.
void prefault_read(const void* p, size_t bytes);

// Tells the kernel that [p, p + bytes) is read a few scattered pages at a
// time (MADV_RANDOM; a no-op where it fails): a fault on a page not in the
// page cache then reads that page, not the device's whole read-ahead window
// around it. For a table read a row at a time (the token embedding), where
// each cold row otherwise cost 0.3-1.4 ms of a step reading megabytes
// nobody asked for.
void advise_random_reads(const void* p, size_t bytes);

// Gives the pages wholly inside [p, p + bytes) of a private read-only file
// mapping back to the page cache (MADV_DONTNEED; a no-op where it fails):
// bytes a copy or a packed form now stands for. A later read of them faults
// the file's pages in again, so it is never wrong, only slower. Returns
// where the released pages end (a page boundary), or p when none was
// whole: a copy in chunks calls it again from there, so each page is
// released once and the page straddling two chunks with the second.
const void* release_pages(const void* p, size_t bytes);

}  // namespace onebit
