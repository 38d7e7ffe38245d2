#include "base/memory_budget.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cctype>

#include "base/error.h"
#include "base/sizes.h"

#include <cstdlib>

namespace onebit {

namespace {

std::atomic<uint64_t> g_limit{0};  // 0: not set yet, the physical memory
std::atomic<uint64_t> g_in_use{0};

}  // namespace

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : uint64_t{1} << 40;
}

void set_memory_limit(uint64_t bytes) { g_limit.store(bytes, std::memory_order_relaxed); }

uint64_t memory_limit() {
  const uint64_t l = g_limit.load(std::memory_order_relaxed);
  if (l) return l;
  // Read once: sysconf(_SC_PHYS_PAGES) is a sysinfo system call, and every
  // budgeted allocation asks (a decode step's plan patch makes hundreds).
  static const uint64_t physical = physical_memory_bytes();
  return physical;
}

uint64_t memory_in_use() { return g_in_use.load(std::memory_order_relaxed); }

void memory_reserve(uint64_t bytes, std::string_view what) {
  const uint64_t limit = memory_limit();
  uint64_t cur = g_in_use.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > limit || cur > limit - bytes)
      fail("{}{}{} would exceed the memory budget of {} ({} in use; raise it with --max-memory)", what,
           what.empty() ? "" : ": ", format_bytes(bytes), format_bytes(limit), format_bytes(cur));
    if (g_in_use.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) return;
  }
}

void memory_release(uint64_t bytes) {
  if (bytes) g_in_use.fetch_sub(bytes, std::memory_order_relaxed);
}

namespace {
size_t rounded(size_t bytes, size_t align) {
  const size_t a = align < 64 ? 64 : align;
  if (bytes > kMaxTensorBytes) fail("an allocation of {} bytes is larger than 2^48 bytes", bytes);
  return bytes == 0 ? a : (bytes + a - 1) / a * a;
}
}  // namespace

void* budgeted_alloc(size_t bytes, size_t align, std::string_view what) {
  const size_t r = rounded(bytes, align);
  memory_reserve(r, what);
  void* p = std::aligned_alloc(align < 64 ? 64 : align, r);
  if (!p) {
    memory_release(r);
    fail("{}{}out of memory allocating {}", what, what.empty() ? "" : ": ", format_bytes(r));
  }
  return p;
}

void budgeted_free(void* p, size_t bytes, size_t align) {
  if (!p) return;
  std::free(p);
  memory_release(rounded(bytes, align));
}

namespace {
constexpr size_t kPage = 4096;

// `r` bytes (a page multiple) of fresh anonymous pages starting at a
// multiple of `align` (a power-of-two page multiple), counted against the
// budget: over-mapped by the alignment, the aligned part kept, the rest
// given back. `flags` are added to mmap's.
void* map_aligned(size_t r, size_t align, int flags, std::string_view what) {
  memory_reserve(r, what);
  const size_t extra = align - kPage;
  void* m = mmap(nullptr, r + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (m == MAP_FAILED) {
    memory_release(r);
    fail("{}{}out of memory mapping {}", what, what.empty() ? "" : ": ", format_bytes(r));
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(m), start = (base + align - 1) / align * align;
  if (start > base) munmap(m, start - base);
  if (const size_t tail = base + r + extra - (start + r)) munmap(reinterpret_cast<void*>(start + r), tail);
  return reinterpret_cast<void*>(start);
}
}  // namespace

void* budgeted_pages(size_t bytes, size_t align, std::string_view what) {
  if (align < kPage || (align & (align - 1))) fail("budgeted_pages: alignment {} is not a power-of-two page multiple", align);
  // MAP_POPULATE: the kernel allocates and zeroes every page in this one
  // call rather than in a fault per 4 KiB as the packer first writes them.
  return map_aligned(rounded(bytes, kPage), align, MAP_POPULATE, what);
}

void* budgeted_huge_pages(size_t bytes, std::string_view what) {
  const size_t r = rounded(bytes, kPage);
  void* p = map_aligned(r, kHugePageBytes, 0, what);
  // Advice only: without it (or without huge pages to give) the pages are 4 KiB.
  (void)madvise(p, r, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
  (void)madvise(p, r, MADV_POPULATE_WRITE);
#endif
  return p;
}

void budgeted_pages_free(void* p, size_t bytes) {
  if (!p) return;
  const size_t r = rounded(bytes, kPage);
  munmap(p, r);
  memory_release(r);
}

std::shared_ptr<void> budgeted_shared(size_t bytes, size_t align, std::string_view what) {
  void* p = budgeted_alloc(bytes, align, what);
  return std::shared_ptr<void>(p, [bytes, align](void* q) { budgeted_free(q, bytes, align); });
}

std::string format_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", double(b) / double(uint64_t{1} << 30));
  if (b >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", double(b) / double(uint64_t{1} << 20));
  if (b >= (uint64_t{1} << 10)) return fmt::format("{:.1f} KiB", double(b) / 1024.0);
  return fmt::format("{} bytes", b);
}

bool parse_bytes(std::string_view s, uint64_t& out) {
  size_t i = 0;
  uint64_t v = 0;
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + uint64_t(s[i++] - '0');
  }
  std::string_view unit = s.substr(i);
  int shift = 0;
  if (!unit.empty()) {
    switch (std::toupper(static_cast<unsigned char>(unit[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      case 'B': shift = -1; break;
      default: return false;
    }
    unit.remove_prefix(1);
    if (shift < 0) {
      if (!unit.empty()) return false;
      shift = 0;
    } else if (!(unit.empty() || unit == "B" || unit == "i" || unit == "iB")) {
      return false;
    }
  }
  if (shift && v > (UINT64_MAX >> shift)) return false;
  out = v << shift;
  return true;
}

}  // namespace onebit
