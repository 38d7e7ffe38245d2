#include "ops/strided_copy.h"

#include <cstring>

#include "base/thread_pool.h"

namespace onebit {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

namespace {

template <size_t Bytes>
void copy_run(const uint8_t* src, int64_t stride, uint8_t* dst, int64_t n) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * Bytes);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * int64_t(Bytes), src + i * stride * int64_t(Bytes), Bytes);
}

void copy_run_any(const uint8_t* src, int64_t stride, uint8_t* dst, int64_t n, size_t bytes) {
  switch (bytes) {
    case 1: return copy_run<1>(src, stride, dst, n);
    case 2: return copy_run<2>(src, stride, dst, n);
    case 4: return copy_run<4>(src, stride, dst, n);
    case 8: return copy_run<8>(src, stride, dst, n);
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * int64_t(bytes), src + i * stride * int64_t(bytes), bytes);
  }
}

}  // namespace

void strided_copy(const StridedView& src, void* dst, size_t elem_bytes, ThreadPool& pool) {
  // Collapse: drop size-1 dims, merge a dim into the next when stride[d] == stride[d+1] * shape[d+1].
  std::vector<int64_t> dims, strides;
  for (size_t d = 0; d < src.shape.size(); ++d) {
    if (src.shape[d] == 0) return;
    if (src.shape[d] == 1) continue;
    if (!dims.empty() && strides.back() == src.strides[d] * src.shape[d]) {
      dims.back() *= src.shape[d];
      strides.back() = src.strides[d];
    } else {
      dims.push_back(src.shape[d]);
      strides.push_back(src.strides[d]);
    }
  }
  if (dims.empty()) {
    std::memcpy(dst, src.base, elem_bytes);
    return;
  }
  const int64_t inner = dims.back(), inner_stride = strides.back();
  dims.pop_back();
  strides.pop_back();
  int64_t outer = 1;
  for (int64_t d : dims) outer *= d;
  uint8_t* out = static_cast<uint8_t*>(dst);
  const int64_t eb = static_cast<int64_t>(elem_bytes);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, inner * eb));
  pool.parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`, then advance like an odometer.
    std::vector<int64_t> idx(dims.size(), 0);
    int64_t rem = begin, offset = 0;
    for (size_t d = dims.size(); d-- > 0;) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      offset += idx[d] * strides[d];
    }
    for (int64_t o = begin; o < end; ++o) {
      copy_run_any(src.base + offset * eb, inner_stride, out + o * inner * eb, inner, elem_bytes);
      for (size_t d = dims.size(); d-- > 0;) {
        offset += strides[d];
        if (++idx[d] < dims[d]) break;
        offset -= strides[d] * dims[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace onebit
