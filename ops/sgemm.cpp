// SGEMM driver: packing, cache blocking and threading around the
// microkernels of one SgemmConfig. The layout and loop nest are described in
// ops/sgemm.h; the loop order within a task follows Goto & van de Geijn,
// "Anatomy of High-Performance Matrix Multiplication" (TOMS 2008), with B
// pre-packed so no B block is copied per call.
#include "ops/sgemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <cstring>
#include <new>

#include <immintrin.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/memory_budget.h"
#include "quant/ukernels/f32_ukernels.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

constexpr size_t kAlign = 64;
// Packed weights of at least one huge page go on 2 MiB pages (THP is
// madvise-only on many systems): fewer TLB misses while streaming them,
// measured +2-5 % at M = 1 for 12 MiB and 594 MiB weights.
constexpr size_t kHugePage = size_t{2} << 20;

// Below these sizes the calling thread does the work alone: waking the pool
// costs a few microseconds, about what 256 KiB of weights takes to stream or
// 2 MFLOP to compute on one core.
constexpr size_t kMinParallelGemvFloats = size_t{1} << 16;
constexpr double kMinParallelFlops = 2e6;
constexpr size_t kMinParallelPackFloats = size_t{1} << 18;
// Rows of A per M block: its packed A (256 rows × KC 1024 = 1 MiB) stays in
// L2 across the NC blocks of B.
constexpr size_t kMcTarget = 256;
// A KC × NC block of packed B: half of L2, so it survives while every MR-row
// micro-panel of the M block passes over it.
constexpr size_t kBBlockBytes = size_t{1} << 20;
// Tasks per thread: dynamic scheduling evens out cores that other processes
// slow down.
constexpr size_t kTasksPerThread = 4;

size_t div_up(size_t x, size_t y) { return (x + y - 1) / y; }
size_t round_up(size_t x, size_t y) { return div_up(x, y) * y; }
size_t aligned_bytes(size_t floats) { return round_up(floats * sizeof(float), kAlign); }

// Where panel p of B starts and how far apart its K rows are: packed panels
// are [K][NR] blocks (panel_stride K·NR, ldb NR); a row-major B read in
// place has panel_stride NR and its own ldb.
struct BView {
  const float* data;
  size_t panel_stride;
  size_t ldb;
};

// Runs fn(begin, end) over [0, n): split evenly over the pool when `worth`,
// else on this thread.
template <class F>
void split(ThreadPool* pool, size_t n, bool worth, F&& fn) {
  if (!pool || pool->size() == 1 || !worth || n < 2) {
    fn(int64_t{0}, static_cast<int64_t>(n));
    return;
  }
  pool->parallel_for(static_cast<int64_t>(n), 1, fn);
}

// Rows [0, 4) × columns [0, 4) of a (rows lda apart) to d, column c at
// d + c·ld: one 4×4 transpose.
inline void transpose4x4(const float* a, size_t lda, float* d, size_t ld) {
  __m128 r0 = _mm_loadu_ps(a), r1 = _mm_loadu_ps(a + lda), r2 = _mm_loadu_ps(a + 2 * lda),
         r3 = _mm_loadu_ps(a + 3 * lda);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(d, r0);
  _mm_storeu_ps(d + ld, r1);
  _mm_storeu_ps(d + 2 * ld, r2);
  _mm_storeu_ps(d + 3 * ld, r3);
}

// Micro-panels [i0, i1) of A into dst: panel i is [K][MR], rows past M zero.
// A(m, k) = a[m·lda + k], or a[k·lda + m] when trans.
void pack_a(size_t mr_tile, size_t m, size_t k, const float* a, size_t lda, bool trans, float* dst, size_t i0,
            size_t i1) {
  for (size_t i = i0; i < i1; ++i) {
    float* d = dst + i * k * mr_tile;
    const size_t row0 = i * mr_tile, rows = std::min(mr_tile, m - row0);
    if (rows < mr_tile)
      for (size_t kk = 0; kk < k; ++kk) std::fill(d + kk * mr_tile + rows, d + (kk + 1) * mr_tile, 0.0f);
    if (!trans) {
      // Four columns of every group of four rows at a time, so the panel is
      // written in order (element by element it took 30 % of a prompt's
      // P·V, a prompt's P being long rows); the rest one by one.
      const size_t groups = rows / 4 * 4, k4 = k / 4 * 4;
      for (size_t kk = 0; kk < k4; kk += 4)
        for (size_t r = 0; r < groups; r += 4)
          transpose4x4(a + (row0 + r) * lda + kk, lda, d + kk * mr_tile + r, mr_tile);
      for (size_t r = 0; r < rows; ++r) {
        const float* src = a + (row0 + r) * lda;
        for (size_t kk = r < groups ? k4 : 0; kk < k; ++kk) d[kk * mr_tile + r] = src[kk];
      }
    } else {
      for (size_t kk = 0; kk < k; ++kk) std::memcpy(d + kk * mr_tile, a + kk * lda + row0, rows * sizeof(float));
    }
  }
}

// Panels [p0, p1) of B into dst: panel p is [K][NR], columns past N zero.
// B(k, n) = b[k·ldb + n], or b[n·ldb + k] when trans.
void pack_b(size_t nr, size_t k, size_t n, const float* b, size_t ldb, bool trans, float* dst, size_t p0,
            size_t p1) {
  for (size_t p = p0; p < p1; ++p) {
    float* d = dst + p * k * nr;
    const size_t col0 = p * nr, cols = std::min(nr, n - col0);
    if (!trans) {
      for (size_t kk = 0; kk < k; ++kk) {
        std::memcpy(d + kk * nr, b + kk * ldb + col0, cols * sizeof(float));
        std::fill(d + kk * nr + cols, d + (kk + 1) * nr, 0.0f);
      }
    } else {
      if (cols < nr)
        for (size_t kk = 0; kk < k; ++kk) std::fill(d + kk * nr + cols, d + (kk + 1) * nr, 0.0f);
      for (size_t j = 0; j < cols; ++j) {
        const float* src = b + (col0 + j) * ldb;
        for (size_t kk = 0; kk < k; ++kk) d[kk * nr + j] = src[kk];
      }
    }
  }
}

void pack_a_all(const SgemmConfig& cfg, size_t m, size_t k, const float* a, size_t lda, bool trans, float* dst,
                ThreadPool* pool) {
  const size_t panels = div_up(m, cfg.mr);
  split(pool, panels, m * k >= kMinParallelPackFloats, [&](int64_t i0, int64_t i1) {
    pack_a(cfg.mr, m, k, a, lda, trans, dst, static_cast<size_t>(i0), static_cast<size_t>(i1));
  });
}

void pack_b_all(const SgemmConfig& cfg, size_t k, size_t n, const float* b, size_t ldb, bool trans, float* dst,
                ThreadPool* pool) {
  const size_t panels = div_up(n, cfg.nr);
  split(pool, panels, k * n >= kMinParallelPackFloats, [&](int64_t p0, int64_t p1) {
    pack_b(cfg.nr, k, n, b, ldb, trans, dst, static_cast<size_t>(p0), static_cast<size_t>(p1));
  });
}

// C with K = 0: the bias, or zeros.
void fill_bias(size_t m, size_t n, const float* bias, float* c, size_t ldc) {
  for (size_t i = 0; i < m; ++i) {
    if (bias) std::memcpy(c + i * ldc, bias, n * sizeof(float));
    else std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  }
}

// One row: each panel is a contiguous K×NR read (packed B), so a run of
// panels is one linear stream, which the hardware prefetcher follows at full
// bandwidth (software prefetch measured no gain here, 1 to 594 MiB). The
// panels are cut into a few runs per thread, taken dynamically, so a core
// that another process slows does not hold up the call.
void run_gemv(const SgemmConfig& cfg, size_t n, size_t k, const float* a, BView b, const float* bias, float* c,
              ThreadPool* pool) {
  const size_t nr = cfg.nr, panels = div_up(n, nr);
  auto body = [&](size_t p0, size_t p1) {
    for (size_t p = p0; p < p1; ++p)
      cfg.gemv(std::min(nr, n - p * nr), k, a, b.data + p * b.panel_stride, b.ldb, c + p * nr,
               bias ? bias + p * nr : nullptr);
  };
  const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
  const size_t runs = std::min({panels, threads * kTasksPerThread, div_up(k * n, kMinParallelGemvFloats)});
  if (threads == 1 || runs < 2) return body(0, panels);
  const size_t per = div_up(panels, runs);
  pool->run(static_cast<int64_t>(div_up(panels, per)), [&](int64_t r) {
    const size_t p0 = static_cast<size_t>(r) * per;
    body(p0, std::min(panels, p0 + per));
  });
}

// Steps of at most `cap` through k, all as even as they can be, so
// K = KC + 1 is two halves rather than KC and a sliver.
size_t even_step(size_t k, size_t cap) { return div_up(k, div_up(k, cap)); }
size_t kc_step_of(const SgemmConfig& cfg, size_t k) { return even_step(k, cfg.kc); }
// Panels per NC block: about kBBlockBytes of packed B.
size_t nc_block_of(const SgemmConfig& cfg, size_t kc_step) {
  return std::max<size_t>(1, kBBlockBytes / (kc_step * cfg.nr * sizeof(float)));
}

// A constant B read in place (sgemm_weight) runs with its own blocking. The
// K blocks change where C is stored and reloaded between kernel calls, not
// the order of any output's FMAs.
//   Up to kInPlaceRows rows of A, the kernels read B where it lies, in K
//   blocks of kInPlaceKc rows: a block's rows are few enough for the L2
//   prefetcher to follow each as a stream while the panels walk along them.
//   More rows pack a block at a time: at most kPackColumns wide, so each of
//   its K rows is one contiguous run, and as deep as fits kBBlockBytes (at
//   least kMinPackKc rows).
// Measured on the Qwen3-0.6B shape, float32, one thread, tok/s at 32 / 64 /
// 128 / 256 rows: B packed at load 88 / 112 / 122 / 123; in place 96 / 105
// / 112 / 109; packed per block 71 / 95 / 114 / 120.
constexpr size_t kInPlaceRows = 64, kInPlaceKc = 32;
constexpr size_t kPackColumns = 3072, kMinPackKc = 16;
size_t packed_kc_step(const SgemmConfig& cfg, size_t k, size_t nc_block) {
  const size_t fit = kBBlockBytes / (nc_block * cfg.nr * sizeof(float));
  return even_step(k, std::max(kMinPackKc, std::min(cfg.kc, fit)));
}

// B kept [K,N] in place (sgemm_weight): each task packs the KC×NC block it
// is about to use into a buffer of its own, taken from `count` buffers of
// `floats` each (at most 64: one bit each in `used`); a task finding all of
// them taken (more threads than buffers) waits for one.
class BlockPacker {
 public:
  BlockPacker(const float* b, size_t ldb, size_t n, size_t nr, float* buffers, size_t floats, size_t count)
      : b_(b), ldb_(ldb), n_(n), nr_(nr), buffers_(buffers), floats_(floats), count_(std::min<size_t>(count, 64)) {}

  // Panels [p0, p1) × rows [k0, k0 + kc) of B as [p1 − p0][kc][NR] (columns
  // past N zero), read row by row: each row's part is one contiguous run.
  float* pack(size_t p0, size_t p1, size_t k0, size_t kc) const {
    float* dst = acquire();
    for (size_t kk = 0; kk < kc; ++kk) {
      const float* row = b_ + (k0 + kk) * ldb_;
      for (size_t p = p0; p < p1; ++p) {
        float* d = dst + ((p - p0) * kc + kk) * nr_;
        const size_t col0 = p * nr_, cols = std::min(nr_, n_ - col0);
        std::memcpy(d, row + col0, cols * sizeof(float));
        if (cols < nr_) std::fill(d + cols, d + nr_, 0.0f);
      }
    }
    return dst;
  }
  void release(const float* buffer) const {
    used_.fetch_and(~(uint64_t{1} << static_cast<size_t>((buffer - buffers_) / static_cast<ptrdiff_t>(floats_))));
  }

 private:
  float* acquire() const {
    for (;;) {
      for (size_t i = 0; i < count_; ++i)
        if (!(used_.fetch_or(uint64_t{1} << i) & (uint64_t{1} << i))) return buffers_ + i * floats_;
      _mm_pause();
    }
  }

  const float* b_;
  size_t ldb_, n_, nr_;
  float* buffers_;
  size_t floats_, count_;
  mutable std::atomic<uint64_t> used_{0};
};

// M > 1 with A packed: tasks are (M block, run of panels). Within a task the
// nest is NC block → K block → MR rows → panel: the MR×KC micro-panel of A
// stays in L1 while the KC×NC block of B (about kBBlockBytes) streams from
// L2, which the kernels prefetch; MLAS orders its loops the same way. M
// blocks are as tall as L2 allows, since each one re-reads all of B.
// With a `packer`, B is read through it a block at a time (b is unused).
void run_gemm(const SgemmConfig& cfg, size_t m, size_t n, size_t k, const float* apacked, BView b,
              const float* bias, float* c, size_t ldc, ThreadPool* pool, const BlockPacker* packer = nullptr) {
  const size_t mr = cfg.mr, nr = cfg.nr;
  const size_t panels = div_up(n, nr);
  const bool parallel = pool && pool->size() > 1 && 2.0 * double(m) * double(n) * double(k) >= kMinParallelFlops;
  const size_t threads = parallel ? static_cast<size_t>(pool->size()) : 1;

  size_t kc_step = kc_step_of(cfg, k), nc_block = nc_block_of(cfg, kc_step);
  size_t m_blocks = div_up(m, kMcTarget);
  const size_t mc = round_up(div_up(m, m_blocks), mr);
  m_blocks = div_up(m, mc);
  // Packing B as it goes reads each block's rows as runs as long as its
  // panels: one chunk of panels per thread, blocks of up to kPackColumns
  // columns and as many K rows as fit kBBlockBytes.
  const size_t per_thread = packer || b.ldb != nr ? 1 : kTasksPerThread;
  size_t n_chunks = threads == 1 ? 1 : std::min(panels, div_up(threads * per_thread, m_blocks));
  const size_t chunk = div_up(panels, n_chunks);
  n_chunks = div_up(panels, chunk);
  if (packer || b.ldb != nr) {  // B in place: packed per block, or read as it lies
    nc_block = std::min(chunk, std::max<size_t>(1, kPackColumns / nr));
    kc_step = packer ? packed_kc_step(cfg, k, nc_block) : even_step(k, kInPlaceKc);
  }

  auto task = [&](int64_t t) {
    const size_t ib = static_cast<size_t>(t) / n_chunks, jb = static_cast<size_t>(t) % n_chunks;
    const size_t row0 = ib * mc, row1 = std::min(m, row0 + mc);
    const size_t pan0 = jb * chunk, pan1 = std::min(panels, pan0 + chunk);
    for (size_t pb = pan0; pb < pan1; pb += nc_block) {
      const size_t pe = std::min(pan1, pb + nc_block);
      for (size_t pc = 0; pc < k; pc += kc_step) {
        const size_t kc = std::min(kc_step, k - pc);
        const float* block = packer ? packer->pack(pb, pe, pc, kc) : nullptr;
        for (size_t i = row0; i < row1; i += mr) {
          const float* ap = apacked + (i / mr) * k * mr + pc * mr;
          for (size_t p = pb; p < pe; ++p) {
            const float* bp = block ? block + (p - pb) * kc * nr : b.data + p * b.panel_stride + pc * b.ldb;
            cfg.gemm(std::min(mr, row1 - i), std::min(nr, n - p * nr), kc, ap, bp, block ? nr : b.ldb,
                     c + i * ldc + p * nr, ldc, pc == 0 && bias ? bias + p * nr : nullptr, pc > 0);
          }
        }
        if (block) packer->release(block);
      }
    }
  };
  const size_t tasks = m_blocks * n_chunks;
  if (threads == 1) {
    for (size_t t = 0; t < tasks; ++t) task(static_cast<int64_t>(t));
  } else {
    pool->run(static_cast<int64_t>(tasks), task);
  }
}

// Workspace for packed A: none for one untransposed row (read in place).
size_t a_workspace(const SgemmConfig& cfg, size_t m, size_t k, bool trans_a) {
  if (m == 0 || k == 0) return 0;
  if (m == 1) return trans_a ? aligned_bytes(k) : 0;
  return aligned_bytes(round_up(m, cfg.mr) * k);
}

// A ready for the kernels: the row itself, a gathered column, or micro-panels.
const float* prepare_a(const SgemmConfig& cfg, size_t m, size_t k, const float* a, size_t lda, bool trans_a,
                       float* ws, ThreadPool* pool) {
  if (m == 1 && !trans_a) return a;
  if (m == 1) {
    for (size_t kk = 0; kk < k; ++kk) ws[kk] = a[kk * lda];
    return ws;
  }
  pack_a_all(cfg, m, k, a, lda, trans_a, ws, pool);
  return ws;
}

void run(const SgemmConfig& cfg, size_t m, size_t n, size_t k, const float* a, BView b, const float* bias, float* c,
         size_t ldc, ThreadPool* pool) {
  if (m == 1) run_gemv(cfg, n, k, a, b, bias, c, pool);
  else run_gemm(cfg, m, n, k, a, b, bias, c, ldc, pool);
}

}  // namespace

void PackedB::Free::operator()(float* p) const {
  if (pages)
    budgeted_pages_free(p, bytes);
  else
    budgeted_free(p, bytes, align);
}

PackedB::PackedB(const SgemmConfig& config, size_t k, size_t n, const float* b, size_t ldb, bool trans_b,
                 ThreadPool* pool, bool huge_pages)
    : config_(&config), k_(k), n_(n), panels_(div_up(n, config.nr)) {
  size_t bytes = std::max(kAlign, aligned_bytes(panels_ * k_ * config.nr));
  // 2 MiB-aligned so the weight can live on huge pages. Faulting them in as
  // huge pages during the copy (MADV_HUGEPAGE first) made loading Qwen3-0.6B
  // take 8.1 s instead of 1.8 s on the benchmark machine, for ~10 % faster
  // decode; so by default the hint comes after packing (khugepaged may
  // collapse the pages in the background), and `huge_pages`
  // (ONEBIT_HUGE_PAGES=1) asks for them up front. Either way failure just
  // means 4 KiB pages.
  const bool huge = bytes >= kHugePage, eager = huge_pages;
  if (huge) bytes = round_up(bytes, kHugePage);
  const size_t align = huge ? kHugePage : kAlign;
  // A large weight not asked onto huge pages up front gets populated pages
  // of its own (base/memory_budget.h: no fault per 4 KiB while it is copied).
  const bool pages = huge && !eager;
  const std::string what = fmt::format("a packed {}x{} float32 weight", k, n);
  data_ = std::unique_ptr<float[], Free>(
      static_cast<float*>(pages ? budgeted_pages(bytes, align, what) : budgeted_alloc(bytes, align, what)),
      Free{bytes, align, pages});
  if (huge && eager) madvise(data_.get(), bytes, MADV_HUGEPAGE);
  pack_b_all(config, k, n, b, ldb, trans_b, data_.get(), pool);
  if (huge && !eager) madvise(data_.get(), bytes, MADV_HUGEPAGE);
}

size_t sgemm_packed_workspace(const PackedB& b, size_t m, bool trans_a) {
  return a_workspace(b.config(), m, b.k(), trans_a);
}

void sgemm_packed(size_t m, const float* a, size_t lda, bool trans_a, const PackedB& b, const float* bias, float* c,
                  size_t ldc, void* workspace, ThreadPool* pool) {
  const SgemmConfig& cfg = b.config();
  const size_t n = b.n(), k = b.k();
  if (m == 0 || n == 0) return;
  if (k == 0) return fill_bias(m, n, bias, c, ldc);
  const float* ap = prepare_a(cfg, m, k, a, lda, trans_a, static_cast<float*>(workspace), pool);
  run(cfg, m, n, k, ap, BView{b.data(), k * cfg.nr, cfg.nr}, bias, c, ldc, pool);
}

// A against a transposed B (attention's Q·Kᵀ): dot products of rows read in
// place, so Kᵀ is never packed; threads take runs of B's rows, and each run
// goes through A kF32DotMaxRows rows at a time. Every row count takes this
// path, so a row's scores do not depend on how many rows the call has
// (decode, prefill and a batched verification of drafted tokens agree bit
// for bit).
static bool uses_dot(bool trans_a, bool trans_b) { return trans_b && !trans_a; }

static void run_dot(const SgemmConfig& cfg, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                    size_t ldb, const float* bias, float* c, size_t ldc, ThreadPool* pool) {
  const auto body = [&](size_t j0, size_t nj) {
    for (size_t r = 0; r < m; r += kF32DotMaxRows)
      cfg.dot(std::min(kF32DotMaxRows, m - r), nj, k, a + r * lda, lda, b + j0 * ldb, ldb, c + r * ldc + j0, ldc,
              bias ? bias + j0 : nullptr);
  };
  const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
  const size_t runs = std::min({n, threads * kTasksPerThread, div_up(m * k * n, kMinParallelGemvFloats)});
  if (threads == 1 || runs < 2) return body(0, n);
  const size_t per = div_up(n, runs);
  pool->run(static_cast<int64_t>(div_up(n, per)), [&](int64_t r) {
    const size_t j0 = static_cast<size_t>(r) * per;
    body(j0, std::min(n, j0 + per) - j0);
  });
}

// B is packed when it is transposed or when more than one micro-panel of A
// rows reuses it; otherwise the kernels read its rows in place.
static bool packs_b(const SgemmConfig& cfg, size_t m, bool trans_b) { return trans_b || m > cfg.mr; }

size_t sgemm_workspace(const SgemmConfig& cfg, size_t m, size_t n, size_t k, bool trans_a, bool trans_b) {
  if (m == 0 || n == 0 || k == 0 || uses_dot(trans_a, trans_b)) return 0;
  size_t bytes = a_workspace(cfg, m, k, trans_a);
  if (packs_b(cfg, m, trans_b)) bytes += aligned_bytes(round_up(n, cfg.nr) * k);
  return bytes;
}

void sgemm(const SgemmConfig& cfg, size_t m, size_t n, size_t k, const float* a, size_t lda, bool trans_a,
           const float* b, size_t ldb, bool trans_b, const float* bias, float* c, size_t ldc, void* workspace,
           ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) return fill_bias(m, n, bias, c, ldc);
  if (uses_dot(trans_a, trans_b)) return run_dot(cfg, m, n, k, a, lda, b, ldb, bias, c, ldc, pool);
  float* ws = static_cast<float*>(workspace);
  const float* ap = prepare_a(cfg, m, k, a, lda, trans_a, ws, pool);
  BView bv{b, cfg.nr, ldb};
  if (packs_b(cfg, m, trans_b)) {
    float* bp = ws + a_workspace(cfg, m, k, trans_a) / sizeof(float);
    pack_b_all(cfg, k, n, b, ldb, trans_b, bp, pool);
    bv = BView{bp, k * cfg.nr, cfg.nr};
  }
  run(cfg, m, n, k, ap, bv, bias, c, ldc, pool);
}

void sgemm_row_blocks(const SgemmConfig& cfg, size_t m, size_t n, size_t k, const float* a, size_t lda,
                      const float* b, size_t ldb, const size_t* starts, const size_t* ks, size_t blocks, float* c,
                      size_t ldc, void* workspace, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  auto* ws = static_cast<float*>(workspace);
  // B packed whole, after the room packed A takes for all m rows.
  const bool packed = packs_b(cfg, m, false) && k > 0;
  float* bp = packed ? ws + a_workspace(cfg, m, k, false) / sizeof(float) : nullptr;
  if (packed) pack_b_all(cfg, k, n, b, ldb, false, bp, pool);
  for (size_t i = 0; i < blocks; ++i) {
    const size_t r0 = starts[i], r1 = i + 1 < blocks ? starts[i + 1] : m, kb = std::min(ks[i], k);
    if (r1 <= r0) continue;
    if (kb == 0) {
      fill_bias(r1 - r0, n, nullptr, c + r0 * ldc, ldc);
      continue;
    }
    if (!packed || !packs_b(cfg, r1 - r0, false)) {  // a block sgemm would not pack B for
      sgemm(cfg, r1 - r0, n, kb, a + r0 * lda, lda, false, b, ldb, false, nullptr, c + r0 * ldc, ldc, ws, pool);
      continue;
    }
    const float* ap = prepare_a(cfg, r1 - r0, kb, a + r0 * lda, lda, false, ws, pool);
    // Panels k·NR apart (packed whole); a block reads the first kb rows of each.
    run(cfg, r1 - r0, n, kb, ap, BView{bp, k * cfg.nr, cfg.nr}, nullptr, c + r0 * ldc, ldc, pool);
  }
}

// M = 1 over B in place: column chunks of C, each through every row of B
// in order, kF32AxpyRows rows per axpy call (C's chunk stays in L1). A chunk
// is at most kAxpyChunk columns, and when threads share the call there are
// two per thread.
static void run_axpy(const SgemmConfig& cfg, size_t n, size_t k, const float* a, const float* b, size_t ldb,
                     const float* bias, float* c, ThreadPool* pool) {
  constexpr size_t kAxpyChunk = 4096, kUnit = 16;
  const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
  const size_t runs = std::min({div_up(n, kUnit), threads, div_up(k * n, kMinParallelGemvFloats)});
  const size_t chunk = round_up(div_up(n, std::max(runs, div_up(n, kAxpyChunk))), kUnit);
  const size_t chunks = div_up(n, chunk);
  auto body = [&](size_t j0) {
    const size_t nc = std::min(chunk, n - j0);
    float* y = c + j0;
    if (bias) std::memcpy(y, bias + j0, nc * sizeof(float));
    else std::fill(y, y + nc, 0.0f);
    for (size_t i = 0; i < k; i += kF32AxpyRows)
      cfg.axpy(std::min(kF32AxpyRows, k - i), nc, a + i, b + i * ldb + j0, ldb, y);
  };
  if (threads == 1 || runs < 2 || chunks < 2) {
    for (size_t t = 0; t < chunks; ++t) body(t * chunk);
    return;
  }
  pool->run(static_cast<int64_t>(chunks), [&](int64_t t) { body(static_cast<size_t>(t) * chunk); });
}

// A block buffer: the largest block packed_kc_step allows.
static size_t block_floats(const SgemmConfig& cfg) {
  const size_t nc_block = std::max<size_t>(1, kPackColumns / cfg.nr);
  return aligned_bytes(std::max(kBBlockBytes / sizeof(float), kMinPackKc * nc_block * cfg.nr)) / sizeof(float);
}

size_t sgemm_weight_workspace(const SgemmConfig& cfg, size_t m, size_t n, size_t k, size_t threads) {
  if (m <= 1 || n == 0 || k == 0) return 0;
  if (m <= kInPlaceRows) return a_workspace(cfg, m, k, false);
  return a_workspace(cfg, m, k, false) + std::max<size_t>(1, std::min<size_t>(threads, 64)) * block_floats(cfg) * sizeof(float);
}

void sgemm_weight(const SgemmConfig& cfg, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                  size_t ldb, const float* bias, float* c, size_t ldc, void* workspace, size_t threads,
                  ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) return fill_bias(m, n, bias, c, ldc);
  if (m == 1) return run_axpy(cfg, n, k, a, b, ldb, bias, c, pool);
  float* ws = static_cast<float*>(workspace);
  const float* ap = prepare_a(cfg, m, k, a, lda, false, ws, pool);
  if (m <= kInPlaceRows) return run_gemm(cfg, m, n, k, ap, BView{b, cfg.nr, ldb}, bias, c, ldc, pool);
  const BlockPacker packer(b, ldb, n, cfg.nr, ws + a_workspace(cfg, m, k, false) / sizeof(float), block_floats(cfg),
                           std::max<size_t>(1, threads));
  run_gemm(cfg, m, n, k, ap, BView{nullptr, 0, 0}, bias, c, ldc, pool, &packer);
}

}  // namespace onebit
