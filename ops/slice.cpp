// Slice (opset 13): starts/ends/axes/steps as inputs, clamped as the spec
// says, copied out as a strided view.
#include "base/sizes.h"
#include "ops/axis.h"
#include "graph/op_registry.h"
#include "ops/strided_copy.h"

namespace onebit {

namespace {

struct SliceDims {
  std::vector<int64_t> start, step;  // per input dim
  Shape out;
};

SliceDims plan_slice(const Shape& in, const Tensor& starts, const Tensor* ends, const Tensor* axes, const Tensor* steps) {
  const int64_t rank = static_cast<int64_t>(in.size());
  SliceDims s;
  s.start.assign(in.size(), 0);
  s.step.assign(in.size(), 1);
  s.out = in;
  const int64_t n = starts.size();
  if (ends->size() != n) fail("starts has {} entries, ends {}", n, ends->size());
  if (axes && axes->size() != n) fail("starts has {} entries, axes {}", n, axes->size());
  if (steps && steps->size() != n) fail("starts has {} entries, steps {}", n, steps->size());
  std::vector<bool> seen(in.size(), false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t axis = normalize_axis(axes ? tensor_int_at(*axes, i) : i, rank, "axis");
    if (seen[static_cast<size_t>(axis)]) fail("axis {} appears twice", axis);
    seen[static_cast<size_t>(axis)] = true;
    const int64_t dim = in[static_cast<size_t>(axis)];
    const int64_t step = steps ? tensor_int_at(*steps, i) : 1;
    if (step == 0) fail("step for axis {} is 0", axis);
    int64_t b = tensor_int_at(starts, i), e = tensor_int_at(*ends, i);
    if (b < 0) b = b < -dim ? 0 : b + dim;  // written to avoid overflow at INT64_MIN
    if (e < 0) e = e < -dim ? -1 : e + dim;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    int64_t count = 0;
    // The spans are at most dim + 1; a step of any size (INT64_MIN too) cannot wrap.
    if (step > 0 && e > b) count = ceil_div(e - b, step);
    if (step < 0 && b > e) count = step == INT64_MIN ? 1 : ceil_div(b - e, -step);
    s.start[static_cast<size_t>(axis)] = b;
    s.step[static_cast<size_t>(axis)] = step;
    s.out[static_cast<size_t>(axis)] = count;
  }
  return s;
}

// Element offset of the slice's first element in the input.
int64_t start_offset(const Shape& in, const SliceDims& s) {
  const std::vector<int64_t> strides = contiguous_strides(in);
  int64_t offset = 0;
  for (size_t d = 0; d < strides.size(); ++d) offset += s.start[d] * strides[d];
  return offset;
}

// A slice is one contiguous run of the input when, past the first dim it
// narrows, every dim is whole, that dim has step 1, and every dim before it
// keeps a single index. Slicing one layer out of a stacked KV cache is such
// a run, and then the output is a view rather than a copy.
bool contiguous(const Shape& in, const SliceDims& s) {
  size_t d = 0;
  while (d < in.size() && s.out[d] == in[d] && s.start[d] == 0 && s.step[d] == 1) ++d;  // whole leading dims
  if (d == in.size()) return true;
  for (size_t e = 0; e < d; ++e)
    if (in[e] != 1) return false;
  if (s.step[d] != 1 && s.out[d] > 1) return false;
  for (size_t e = d + 1; e < in.size(); ++e)
    if (s.out[e] != in[e] || s.start[e] != 0 || (s.step[e] != 1 && in[e] > 1)) return false;
  return true;
}

class SliceKernel : public Kernel {
 public:
  explicit SliceKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const SliceDims s = plan_slice(in, ctx.value(1), &ctx.value(2), ctx.has_input(3) ? &ctx.value(3) : nullptr,
                                   ctx.has_input(4) ? &ctx.value(4) : nullptr);
    const int bits = dtype_bits(ctx.dtype(0));
    if (bits >= 8 && numel(s.out) > 0 && contiguous(in, s))
      ctx.alias_output(0, 0, s.out, start_offset(in, s) * (bits / 8));
    else
      ctx.set_output(0, ctx.dtype(0), s.out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (dtype_bits(x.dtype()) < 8) fail("Slice does not support {}", dtype_name(x.dtype()));
    const SliceDims s = plan_slice(x.shape(), ctx.input(1), &ctx.input(2), ctx.has_input(3) ? &ctx.input(3) : nullptr,
                                   ctx.has_input(4) ? &ctx.input(4) : nullptr);
    if (numel(s.out) == 0) return;
    const int64_t eb = dtype_bits(x.dtype()) / 8;
    if (!x.raw()) {
      // A shape-only input (the past a KV state stands for, read by a node
      // the passes left): its view is shape-only too, and nothing is copied.
      if (!ctx.output(0).raw()) return;
      fail("input 0 {} holds no data (a shape-only past) to copy", shape_str(x.shape()));
    }
    const uint8_t* first = static_cast<const uint8_t*>(x.raw()) + start_offset(x.shape(), s) * eb;
    if (ctx.output(0).raw() == first) return;  // planned as a view of the input
    const std::vector<int64_t> strides = contiguous_strides(x.shape());
    StridedView view{first, s.out, {}};
    for (size_t d = 0; d < strides.size(); ++d) view.strides.push_back(strides[d] * s.step[d]);
    strided_copy(view, ctx.output(0).raw(), static_cast<size_t>(eb), ctx.pool());
  }
};

}  // namespace

void register_slice_op(OpRegistry& r) { r.add("", "Slice", 13, kOnnxOpsetMax, make_factory<SliceKernel>()); }

}  // namespace onebit
