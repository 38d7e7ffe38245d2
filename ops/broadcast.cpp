#include "ops/broadcast.h"

#include <algorithm>

#include "base/error.h"

namespace onebit {

Shape broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  std::vector<const Shape*> from(rank, nullptr);  // which input set each dim, for the message
  for (const Shape& s : shapes) {
    const size_t lead = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      const int64_t dim = s[d];
      int64_t& o = out[lead + d];
      if (dim == o || dim == 1) continue;
      if (o == 1) {
        o = dim;
        from[lead + d] = &s;
        continue;
      }
      fail("shapes {} and {} do not broadcast (dim {}: {} vs {})", shape_str(from[lead + d] ? *from[lead + d] : out),
           shape_str(s), lead + d, o, dim);
    }
  }
  return out;
}

BroadcastPlan::BroadcastPlan(const std::vector<Shape>& inputs, const Shape& output) {
  const size_t rank = output.size(), n = inputs.size();
  // Per input, per output dim: stride in elements (0 where broadcast).
  std::vector<std::vector<int64_t>> strides(n, std::vector<int64_t>(rank, 0));
  for (size_t i = 0; i < n; ++i) {
    const Shape& s = inputs[i];
    const size_t lead = rank - s.size();
    int64_t stride = 1;
    for (size_t d = s.size(); d-- > 0;) {
      strides[i][lead + d] = s[d] == 1 ? 0 : stride;
      stride *= s[d];
    }
  }
  // Collapse: drop size-1 dims, merge neighbours that every input walks the same way.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> merged(n);
  for (size_t d = 0; d < rank; ++d) {
    if (output[d] == 1) continue;
    bool can_merge = !dims.empty();
    for (size_t i = 0; i < n && can_merge; ++i) {
      const int64_t prev = merged[i].back(), cur = strides[i][d];
      can_merge = (prev == 0 && cur == 0) || (prev != 0 && cur != 0 && prev == cur * output[d]);
    }
    if (can_merge) {
      dims.back() *= output[d];
      for (size_t i = 0; i < n; ++i) merged[i].back() = strides[i][d];
    } else {
      dims.push_back(output[d]);
      for (size_t i = 0; i < n; ++i) merged[i].push_back(strides[i][d]);
    }
  }
  inner_step_.assign(n, false);
  if (!dims.empty()) {
    inner_ = dims.back();
    for (size_t i = 0; i < n; ++i) {
      inner_step_[i] = merged[i].back() != 0;
      merged[i].pop_back();
    }
    dims.pop_back();
  }
  outer_dims_ = dims;
  strides_ = std::move(merged);
  // An empty output has no runs at all: not one empty run per outer index
  // (a [1, 3, 14719, 8191, 0] output looped 3.6e8 times), and the product
  // of the other dims, which may not fit, is never formed.
  if (std::find(output.begin(), output.end(), 0) != output.end()) {
    outer_ = inner_ = 0;
    return;
  }
  outer_ = 1;
  for (int64_t d : outer_dims_) outer_ *= d;
}

int64_t BroadcastPlan::offset(size_t i, int64_t o) const {
  int64_t off = 0;
  const std::vector<int64_t>& st = strides_[i];
  for (size_t d = outer_dims_.size(); d-- > 0;) {
    const int64_t q = o / outer_dims_[d];
    off += (o - q * outer_dims_[d]) * st[d];
    o = q;
  }
  return off;
}

}  // namespace onebit
