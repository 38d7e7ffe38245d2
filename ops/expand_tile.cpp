// Expand (broadcast to a shape) and Tile (repeat along each axis), both as
// strided views with zero strides on the repeated dims.
#include "ops/broadcast.h"
#include "base/sizes.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"
#include "ops/strided_copy.h"

namespace onebit {

namespace {

class ExpandKernel : public Kernel {
 public:
  explicit ExpandKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape target = tensor_to_ints(ctx.value(1));
    for (int64_t d : target)
      if (d < 0) fail("shape {} has a negative dim", shape_str(target));
    ctx.set_output(0, ctx.dtype(0), broadcast_shapes({ctx.shape(0), target}));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const Shape& out = y.shape();
    const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
    StridedView view{static_cast<const uint8_t*>(x.raw()), out, std::vector<int64_t>(out.size(), 0)};
    const size_t lead = out.size() - x.shape().size();
    for (size_t d = 0; d < x.shape().size(); ++d)
      view.strides[lead + d] = x.shape()[d] == 1 ? 0 : in_strides[d];
    if (y.size() == 0) return;
    strided_copy(view, y.raw(), element_bytes(x.dtype(), "Expand"), ctx.pool());
  }
};

class TileKernel : public Kernel {
 public:
  explicit TileKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> reps = tensor_to_ints(ctx.value(1));
    if (reps.size() != in.size()) fail("repeats has {} entries, the input has rank {}", reps.size(), in.size());
    Shape out(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      if (reps[d] < 0) fail("repeats[{}] is negative ({})", d, reps[d]);
      out[d] = checked_mul(in[d], reps[d], fmt::format("Tile dim {}", d));
    }
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.size() == 0) return;
    // The output laid out as [r0, d0, r1, d1, ...] is row-major identical to
    // [r0*d0, r1*d1, ...]; the repeat dims read with stride 0.
    const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
    StridedView view{static_cast<const uint8_t*>(x.raw()), {}, {}};
    for (size_t d = 0; d < x.shape().size(); ++d) {
      view.shape.push_back(y.shape()[d] / std::max<int64_t>(1, x.shape()[d]));
      view.strides.push_back(0);
      view.shape.push_back(x.shape()[d]);
      view.strides.push_back(in_strides[d]);
    }
    strided_copy(view, y.raw(), element_bytes(x.dtype(), "Tile"), ctx.pool());
  }
};

}  // namespace

void register_expand_tile_ops(OpRegistry& r) {
  r.add("", "Expand", 13, kOnnxOpsetMax, make_factory<ExpandKernel>());
  r.add("", "Tile", 13, kOnnxOpsetMax, make_factory<TileKernel>());
}

}  // namespace onebit
