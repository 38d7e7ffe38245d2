// Small helpers shared by the host op families (axis normalisation is in
// ops/axis.h): the elementwise map with its threading threshold,
// round-half-to-even, and element access for the packed 4-bit types.
//
// Plans are cached per input-shape signature, so reshape() is not called
// before every run(): kernels derive everything run() needs from the input
// tensors themselves, never from state left behind by reshape().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "graph/kernel.h"
#include "graph/tensor.h"
#include "ops/axis.h"
#include "ops/dispatch.h"
#include "base/thread_pool.h"

namespace onebit {

// Elements below which an elementwise loop stays on the caller's thread: a
// pool wake-up costs more than a few thousand cheap element operations.
inline constexpr int64_t kElementwiseGrain = int64_t{1} << 15;

// Runs one(task, slot, inner) for tasks [0, n) of a kernel whose tasks each
// need a workspace slot: with several threads each takes a contiguous run of
// tasks and slot r (its index; inner = null, so the tasks' own GEMMs stay
// single-threaded); else in order on this thread with slot 0 and the pool
// for inner parallelism. At most ThreadPool::default_threads() slots: what
// such kernels size their workspace for.
template <class One>
void run_task_ranges(ThreadPool& pool, int64_t tasks, One&& one) {
  const int64_t ranges = std::min<int64_t>({pool.size(), tasks, ThreadPool::default_threads()});
  if (ranges > 1) {
    const int64_t per = (tasks + ranges - 1) / ranges;
    pool.run(ranges, [&](int64_t r) {
      for (int64_t task = r * per; task < std::min(tasks, (r + 1) * per); ++task) one(task, r, nullptr);
    });
  } else {
    for (int64_t task = 0; task < tasks; ++task) one(task, int64_t{0}, &pool);
  }
}

// Sizes and offsets of workspace parts, rounded up to 64 bytes (the
// workspace's alignment: each part starts on a cache line).
inline size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// Input i of a kernel over a KV state (graph/passes/kv_state.cpp): how many
// elements apart the cache's heads lie, one int64. run() reads it as such.
inline void check_head_stride(int i, DType dtype, const Shape& shape) {
  if (dtype != DType::I64 || numel(shape) != 1)
    fail("input {} (the KV heads' stride) is {} {}, expected one int64", i, dtype_name(dtype), shape_str(shape));
}
inline void check_head_stride(const ReshapeContext& ctx, int i) { check_head_stride(i, ctx.dtype(i), ctx.shape(i)); }

// Ranks up to this use fixed-size index arrays in run() (no allocation).
inline constexpr int kMaxRank = 16;

inline void check_max_rank(int rank, std::string_view op) {
  if (rank > kMaxRank) fail("{} supports inputs up to rank {}, got rank {}", op, kMaxRank, rank);
}

// Product of shape[begin, end).
inline int64_t dims_product(const Shape& shape, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

// Bytes per element for ops that move whole elements; the 4-bit types have
// no byte-addressable element and are refused with the op's name.
inline size_t element_bytes(DType t, std::string_view op) {
  if (dtype_bits(t) < 8) fail("{} does not support {}", op, dtype_name(t));
  return static_cast<size_t>(dtype_bits(t) / 8);
}

// ONNX Reshape's target resolution for an input of shape `in`: 0 copies
// the input's dim (unless allowzero), -1 infers the one dim left.
inline Shape resolve_reshape(const Shape& in, const std::vector<int64_t>& spec, bool allowzero) {
  Shape out(spec.size());
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t dim = spec[i];
    if (dim == 0 && !allowzero) dim = i < in.size() ? in[i] : 0;
    if (dim == -1) {
      infer = static_cast<int64_t>(i);
      continue;
    }
    out[i] = dim;
    known *= dim;
  }
  if (infer >= 0) out[static_cast<size_t>(infer)] = known ? numel(in) / known : 0;
  return out;
}

// Round half to even. std::nearbyint rounds in the current mode, which is
// FE_TONEAREST (ties to even) unless a caller changes it; nothing in 1bit
// does. It compiles to one `roundss`, so loops using it vectorise.
inline float round_half_even(float x) { return std::nearbyint(x); }
inline double round_half_even(double x) { return std::nearbyint(x); }

// y[i] = f(x[i]) for i in [0, n), spread over the pool when n is large.
template <class TI, class TO, class F>
void map_elements(ThreadPool& pool, const TI* x, TO* y, int64_t n, F f) {
  pool.parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
}

// y = f(x) over a float tensor (any of f16/bf16/f32/f64); f takes and returns
// the arithmetic type (float, or double for f64), rounded once on store.
template <class F>
void map_float_tensor(ThreadPool& pool, const Tensor& x, Tensor& y, std::string_view what, F f) {
  dispatch_float(x.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    map_elements(pool, x.data<T>(), y.data<T>(), x.size(), [&](T v) { return A::store(f(A::load(v))); });
  });
}

// Packed 4-bit elements (graph/dtype.h): two per byte, element 2k in the low
// nibble of byte k. Signed nibbles are two's complement in [-8, 7].
inline int nibble_at(const uint8_t* p, int64_t i, bool is_signed) {
  const uint8_t b = p[i >> 1];
  const int v = (i & 1) ? (b >> 4) : (b & 0x0F);
  return is_signed ? ((v ^ 8) - 8) : v;
}

// Writes elements [begin, end) of a packed 4-bit tensor of n elements from
// get(i) (any int; its low 4 bits are stored). `begin` must be even so that
// parallel callers never share a byte; the high nibble past the last element
// of an odd count is written as 0.
template <class Get>
void pack_nibbles(uint8_t* p, int64_t begin, int64_t end, int64_t n, Get get) {
  for (int64_t i = begin; i < end; i += 2) {
    const unsigned lo = static_cast<unsigned>(get(i)) & 0x0Fu;
    const unsigned hi = i + 1 < n ? static_cast<unsigned>(get(i + 1)) & 0x0Fu : 0u;
    p[i >> 1] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// pack_nibbles over [0, n), in parallel chunks of whole bytes.
template <class Get>
void pack_nibbles_parallel(ThreadPool& pool, uint8_t* p, int64_t n, Get get) {
  const int64_t bytes = (n + 1) / 2;
  pool.parallel_for(bytes, kElementwiseGrain / 2, [&](int64_t b0, int64_t b1) {
    pack_nibbles(p, 2 * b0, std::min(2 * b1, n), n, get);
  });
}

}  // namespace onebit
