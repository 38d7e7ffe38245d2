// Work splitting shared by the GEMM drivers (quant/q8_gemm.cpp,
// quant/q4_gemm.cpp, ops/f16w_matmul.cpp). Decode (M = 1) on a family with a
// streams kernel: contiguous shares of the panels, each read as several
// sub-ranges side by side (run_streams); otherwise runs of consecutive
// panels, each a contiguous stream of the packed weight. Larger M is tiled
// into (row block × run of panels) tasks, several per thread. All are taken
// dynamically, which evens out cores that other processes slow.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/thread_pool.h"

namespace onebit::qgemm_detail {

inline size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
inline size_t round_up(size_t a, size_t b) { return div_up(a, b) * b; }

// Below this many multiply-adds the calling thread works alone: waking the
// pool costs a few microseconds, about what 256 KiB of weight takes to stream.
inline constexpr double kMinParallelMacs = double(1 << 18);
inline constexpr size_t kTasksPerThread = 4;
// Rows per block: the block's activations (64 × K bytes) stay in L2 while
// each weight panel is reused across its row tiles from L1.
inline constexpr size_t kRowBlock = 64;

// fn(begin, end) over [0, n): one contiguous range per thread when `worth`.
template <class F>
void split_ranges(ThreadPool* pool, size_t n, bool worth, F&& fn) {
  if (!pool || pool->size() == 1 || !worth || n < 2) {
    fn(size_t{0}, n);
    return;
  }
  pool->parallel_for(static_cast<int64_t>(n), 1,
                     [&](int64_t b, int64_t e) { fn(static_cast<size_t>(b), static_cast<size_t>(e)); });
}

// Decode: fn(begin, end) over [0, n) in runs of `grain` items taken
// dynamically, so a thread the OS delays (other processes, a slow wake-up)
// delays the call by at most one run instead of half the weight. A run of
// about kDecodeRunBytes keeps each stream long enough for the prefetchers.
inline constexpr size_t kDecodeRunBytes = size_t{1} << 16;
// A one-row product read as several streams a thread: contiguous shares a
// thread takes (dynamically, so the threads finish together on a busy machine).
inline constexpr size_t kDecodeShares = 2;
inline constexpr size_t kMaxDecodeStreams = 4;

// Decode over `panels` panels as long streams: kDecodeShares contiguous
// shares a thread when `worth`, each walked as `streams` (at most
// kMaxDecodeStreams) sub-ranges side by side. fn(panel, live) gets, step by
// step, one panel of each sub-range still running (live of them, at most
// kMaxDecodeStreams, in order; only the last sub-ranges of a share run
// short), for a streams kernel (which takes any count) to read together.
// Every panel is handed out exactly once.
template <class F>
void run_streams(ThreadPool* pool, size_t panels, size_t streams, bool worth, F&& fn) {
  if (panels == 0) return;
  if (streams > kMaxDecodeStreams) streams = kMaxDecodeStreams;
  if (streams < 1) streams = 1;
  const size_t threads = worth && pool ? static_cast<size_t>(pool->size()) : 1;
  size_t shares = threads == 1 ? 1 : threads * kDecodeShares;
  if (shares > panels) shares = panels;
  auto share = [&](int64_t t) {
    const size_t p0 = panels * static_cast<size_t>(t) / shares, p1 = panels * static_cast<size_t>(t + 1) / shares;
    const size_t per = div_up(p1 - p0, streams);
    size_t panel[kMaxDecodeStreams];
    for (size_t i = 0; i < per; ++i) {
      size_t live = 0;
      for (size_t s = 0; s < streams && p0 + s * per + i < p1; ++s) panel[live++] = p0 + s * per + i;
      fn(static_cast<const size_t*>(panel), live);
    }
  };
  if (shares == 1) share(0);
  else pool->run(static_cast<int64_t>(shares), share);
}

template <class F>
void split_runs(ThreadPool* pool, size_t n, size_t grain, bool worth, F&& fn) {
  if (!pool || pool->size() == 1 || !worth || n < 2) {
    fn(size_t{0}, n);
    return;
  }
  if (grain < 1) grain = 1;
  const size_t runs = div_up(n, grain);
  pool->run(static_cast<int64_t>(runs), [&](int64_t t) {
    const size_t b = static_cast<size_t>(t) * grain;
    fn(b, b + grain < n ? b + grain : n);
  });
}

// fn(row0, row1, tile0, tile1) over a grid of row blocks × runs of column tiles.
template <class F>
void run_tiles(ThreadPool* pool, size_t m, size_t panels, size_t mr, bool worth, F&& fn) {
  const size_t threads = pool && worth ? static_cast<size_t>(pool->size()) : 1;
  size_t m_blocks = div_up(m, kRowBlock);
  const size_t mc = round_up(div_up(m, m_blocks), mr);
  m_blocks = div_up(m, mc);
  size_t n_chunks = threads == 1 ? 1 : div_up(threads * kTasksPerThread, m_blocks);
  if (n_chunks > panels) n_chunks = panels;
  const size_t chunk = div_up(panels, n_chunks);
  n_chunks = div_up(panels, chunk);
  auto task = [&](int64_t t) {
    const size_t ib = static_cast<size_t>(t) / n_chunks, jb = static_cast<size_t>(t) % n_chunks;
    const size_t row0 = ib * mc, row1 = row0 + mc < m ? row0 + mc : m;
    const size_t pan0 = jb * chunk, pan1 = pan0 + chunk < panels ? pan0 + chunk : panels;
    fn(row0, row1, pan0, pan1);
  };
  const size_t tasks = m_blocks * n_chunks;
  if (threads == 1) {
    for (size_t t = 0; t < tasks; ++t) task(static_cast<int64_t>(t));
  } else {
    pool->run(static_cast<int64_t>(tasks), task);
  }
}

}  // namespace onebit::qgemm_detail
