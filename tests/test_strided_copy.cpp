// strided_copy (ops/strided_copy.h), the loop behind Transpose, Slice, Expand
// and Tile, against a naive element-by-element copy: transposes of the two
// innermost dims (the tiled path) with and without a batch dim, sizes off
// the 32-element tile, broadcast (stride 0) and reversed (negative stride)
// dims, every element size, one and two threads.
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "ops/strided_copy.h"

using namespace onebit;

namespace {

std::vector<uint8_t> naive(const StridedView& v, size_t eb) {
  const int64_t n = numel(v.shape);
  std::vector<uint8_t> out(static_cast<size_t>(n) * eb);
  std::vector<int64_t> idx(v.shape.size(), 0);
  for (int64_t o = 0; o < n; ++o) {
    int64_t rem = o, off = 0;
    for (size_t d = v.shape.size(); d-- > 0;) {
      idx[d] = rem % v.shape[d];
      rem /= v.shape[d];
      off += idx[d] * v.strides[d];
    }
    std::memcpy(out.data() + static_cast<size_t>(o) * eb, v.base + off * static_cast<int64_t>(eb), eb);
  }
  return out;
}

}  // namespace

TEST_CASE("strided_copy equals the element-by-element copy: transposes, broadcasts, reversals", "[strided_copy]") {
  std::vector<uint8_t> src(1 << 20);
  std::mt19937 rng(5);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  struct Case {
    Shape shape;
    std::vector<int64_t> strides;
    int64_t origin;  // elements from the buffer's start to element (0, ..., 0)
  };
  const std::vector<Case> cases = {
      {{37, 45}, {1, 37}, 0},                // [45, 37] transposed (the tiled path)
      {{64, 96}, {1, 64}, 0},                // whole tiles
      {{3, 33, 70}, {33 * 70, 1, 33}, 0},    // a batch of transposes
      {{2, 40, 9}, {0, 1, 40}, 0},           // the batch broadcast
      {{50, 40}, {1, 0}, 0},                 // a broadcast inner dim
      {{40, 50}, {1, -40}, 49 * 40},         // reversed columns
      {{5, 7}, {1, 5}, 0},                   // too small for tiles
      {{4, 6, 8}, {48, 8, 1}, 0},            // contiguous
      {{6, 4, 8}, {8, 48, 1}, 0},            // outer dims swapped
  };
  for (size_t eb : {size_t{1}, size_t{2}, size_t{4}, size_t{8}, size_t{3}})
    for (const Case& c : cases)
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        const StridedView v{src.data() + c.origin * static_cast<int64_t>(eb), c.shape, c.strides};
        std::vector<uint8_t> got(static_cast<size_t>(numel(c.shape)) * eb, 0xAB);
        strided_copy(v, got.data(), eb, pool);
        INFO("shape " << shape_str(c.shape) << " element bytes " << eb << " threads " << threads);
        CHECK(got == naive(v, eb));
      }
}
