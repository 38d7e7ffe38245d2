// Pad (opset 13-27): pads and (from 18) axes as inputs, modes constant, reflect, edge
// and wrap (wrap is opset 19+). Negative pads crop.
#include <cstring>
#include <type_traits>

#include "base/sizes.h"
#include "ops/axis.h"
#include "ops/dispatch.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

enum class PadMode { Constant, Reflect, Edge, Wrap };

class PadKernel : public Kernel {
 public:
  explicit PadKernel(const KernelInfo& info) {
    const std::string mode = info.attrs().get_string("mode", "constant");
    if (mode == "constant") mode_ = PadMode::Constant;
    else if (mode == "reflect") mode_ = PadMode::Reflect;
    else if (mode == "edge") mode_ = PadMode::Edge;
    else if (mode == "wrap" && info.opset() >= 19) mode_ = PadMode::Wrap;
    else fail("attribute 'mode' is '{}', expected constant, reflect, edge{}", mode, info.opset() >= 19 ? " or wrap" : "");
    if (info.has_input(3) && info.opset() < 18)
      fail("input 3 (axes) needs ai.onnx opset 18; this node is opset {}", info.opset());
  }
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> pads = resolve(in.size(), ctx.value(1), ctx.has_input(3) ? &ctx.value(3) : nullptr);
    // Bounded first, so the sums below and the positions run() computes
    // from them cannot overflow.
    for (int64_t p : pads)
      if (p > kMaxElements || p < -kMaxElements) fail("pads {} hold {}, past the largest tensor", shape_str(pads), p);
    Shape out(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      out[d] = in[d] + pads[d] + pads[d + in.size()];
      if (out[d] > kMaxElements) fail("pads {} make dim {} larger than the largest tensor", shape_str(pads), d);
      if (out[d] < 0) fail("pads {} make dim {} negative", shape_str(pads), d);
      if (mode_ != PadMode::Constant && in[d] == 0 && out[d] > 0)
        fail("cannot pad an empty dim {} in a non-constant mode", d);
      if (mode_ == PadMode::Reflect && (pads[d] >= in[d] || pads[d + in.size()] >= in[d]) && out[d] != in[d])
        fail("reflect pads {} need dim {} (size {}) larger than each pad", shape_str(pads), d, in[d]);
    }
    if (ctx.has_input(2) && ctx.dtype(2) != ctx.dtype(0))
      fail("constant_value is {}, the data is {}; they must agree", dtype_name(ctx.dtype(2)), dtype_name(ctx.dtype(0)));
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const size_t rank = x.shape().size();
    const std::vector<int64_t> pads = resolve(rank, ctx.input(1), ctx.has_input(3) ? &ctx.input(3) : nullptr);
    if (y.size() == 0) return;
    dispatch_any(x.dtype(), "Pad", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T fill{};
      if (ctx.has_input(2) && ctx.input(2).size() > 0) {
        if constexpr (std::is_same_v<T, bool>) {
          fill = *static_cast<const uint8_t*>(ctx.input(2).raw()) != 0;  // any byte a caller gave: nonzero is true
        } else {
          fill = ctx.input(2).template data<T>()[0];
        }
      }
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      std::vector<int64_t> in_strides(rank, 1), pos(rank, 0);
      for (size_t d = rank; d-- > 1;) in_strides[d - 1] = in_strides[d] * x.shape()[d];
      for (int64_t i = 0; i < y.size(); ++i) {
        int64_t off = 0;
        bool outside = false;
        for (size_t d = 0; d < rank; ++d) {
          const int64_t n = x.shape()[d];
          int64_t c = pos[d] - pads[d];
          if (c < 0 || c >= n) {
            switch (mode_) {
              case PadMode::Constant: outside = true; break;
              case PadMode::Edge: c = c < 0 ? 0 : n - 1; break;
              case PadMode::Wrap: c = ((c % n) + n) % n; break;
              case PadMode::Reflect: {
                const int64_t period = 2 * (n - 1);
                c = period == 0 ? 0 : ((c % period) + period) % period;
                if (c >= n) c = period - c;
                break;
              }
            }
          }
          off += c * in_strides[d];
        }
        dst[i] = outside ? fill : src[off];
        for (size_t d = rank; d-- > 0;) {
          if (++pos[d] < y.shape()[d]) break;
          pos[d] = 0;
        }
      }
    });
  }

 private:
  // pads for every dim as [begin_0.., end_0..], expanded from `axes` when given.
  std::vector<int64_t> resolve(size_t rank, const Tensor& pads_in, const Tensor* axes_in) const {
    const std::vector<int64_t> pads = tensor_to_ints(pads_in);
    std::vector<int64_t> axes;
    if (axes_in) {
      for (int64_t a : tensor_to_ints(*axes_in)) axes.push_back(normalize_axis(a, static_cast<int64_t>(rank), "axis"));
    } else {
      for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    }
    if (pads.size() != 2 * axes.size()) fail("pads has {} entries, expected {} (2 per axis)", pads.size(), 2 * axes.size());
    std::vector<int64_t> full(2 * rank, 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      full[static_cast<size_t>(axes[i])] = pads[i];
      full[static_cast<size_t>(axes[i]) + rank] = pads[i + axes.size()];
    }
    return full;
  }
  PadMode mode_ = PadMode::Constant;
};

}  // namespace

void register_pad_op(OpRegistry& r) { 
  // 18 added the axes input and 19 mode wrap (the kernel reads the opset);
  // 21, 23, 24, 25 add types.
  r.add_versions("", "Pad", {13, 18, 19, 21, 23, 24, 25}, make_factory<PadKernel>());
 }

}  // namespace onebit
