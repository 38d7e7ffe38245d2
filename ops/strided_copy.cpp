#include "ops/strided_copy.h"

#include <algorithm>
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

// A transpose of the two innermost dims (the source's rows are the
// output's columns: stride 1 along the outer of the two), in 32×32 tiles so
// both sides move whole cache lines: the element by element loop would read
// one element per line. Rows of `a` outputs of `c` elements; output element
// (i, j) is source element i + j·c_stride; `batch` such blocks, the source's
// batch_stride elements apart, the output's a·c.
template <size_t Bytes>
void transpose_tiles(const uint8_t* src, int64_t batch, int64_t batch_stride, int64_t a, int64_t c, int64_t c_stride,
                     uint8_t* dst, ThreadPool& pool) {
  constexpr int64_t kTile = 32, B = static_cast<int64_t>(Bytes);
  const int64_t a_tiles = (a + kTile - 1) / kTile;
  pool.parallel_for(batch * a_tiles, std::max<int64_t>(1, 256 / std::max<int64_t>(1, c / kTile)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / a_tiles, i0 = (t % a_tiles) * kTile, i1 = std::min(a, i0 + kTile);
      const uint8_t* s = src + b * batch_stride * B;
      uint8_t* d = dst + b * a * c * B;
      for (int64_t j0 = 0; j0 < c; j0 += kTile) {
        const int64_t j1 = std::min(c, j0 + kTile);
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i) std::memcpy(d + (i * c + j) * B, s + (i + j * c_stride) * B, Bytes);
      }
    }
  });
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
  uint8_t* out = static_cast<uint8_t*>(dst);
  // [batch?, a, inner] with the a dim contiguous in the source: tiles.
  if (!dims.empty() && strides.back() == 1 && inner_stride != 1 && dims.size() <= 2 && inner >= 8 && dims.back() >= 8) {
    const int64_t a = dims.back(), batch = dims.size() == 2 ? dims[0] : 1, batch_stride = dims.size() == 2 ? strides[0] : 0;
    switch (elem_bytes) {
      case 1: return transpose_tiles<1>(src.base, batch, batch_stride, a, inner, inner_stride, out, pool);
      case 2: return transpose_tiles<2>(src.base, batch, batch_stride, a, inner, inner_stride, out, pool);
      case 4: return transpose_tiles<4>(src.base, batch, batch_stride, a, inner, inner_stride, out, pool);
      case 8: return transpose_tiles<8>(src.base, batch, batch_stride, a, inner, inner_stride, out, pool);
      default: break;
    }
  }
  int64_t outer = 1;
  for (int64_t d : dims) outer *= d;
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
