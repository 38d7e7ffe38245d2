// Concat and Split along one axis: the tensor seen as [outer, axis*inner]
// rows, copied run by run.
#include <cstring>

#include "ops/axis.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"
#include "base/sizes.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

class ConcatKernel : public Kernel {
 public:
  explicit ConcatKernel(const KernelInfo& info) : axis_(info.attrs().get_int("axis")) {}
  std::optional<int64_t> concat_axis() const override { return axis_; }
  void reshape(ReshapeContext& ctx) override {
    Shape out = ctx.shape(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(out.size()), "attribute 'axis'");
    out[static_cast<size_t>(axis)] = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Shape& s = ctx.shape(i);
      if (ctx.dtype(i) != ctx.dtype(0))
        fail("input {} is {}, input 0 is {}", i, dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0)));
      if (s.size() != out.size()) fail("input {} has shape {}, input 0 has {}: ranks differ", i, shape_str(s), shape_str(ctx.shape(0)));
      for (size_t d = 0; d < s.size(); ++d)
        if (static_cast<int64_t>(d) != axis && s[d] != out[d])
          fail("input {} has shape {}, input 0 has {}: dim {} differs", i, shape_str(s), shape_str(ctx.shape(0)), d);
      out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    }
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (y.size() == 0) return;
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, y.rank()));
    const size_t eb = element_bytes(y.dtype(), "Concat");
    const int64_t outer = dims_product(y.shape(), 0, static_cast<int>(axis));
    const int64_t row = dims_product(y.shape(), static_cast<int>(axis), static_cast<int>(y.shape().size())) * static_cast<int64_t>(eb);
    uint8_t* out = static_cast<uint8_t*>(y.raw());
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(row, 1));
    ctx.pool().parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        uint8_t* dst = out + o * row;
        for (int i = 0; i < ctx.num_inputs(); ++i) {
          const Tensor& x = ctx.input(i);
          const int64_t chunk = dims_product(x.shape(), static_cast<int>(axis), static_cast<int>(x.shape().size())) * static_cast<int64_t>(eb);
          if (chunk) std::memcpy(dst, static_cast<const uint8_t*>(x.raw()) + o * chunk, static_cast<size_t>(chunk));
          dst += chunk;
        }
      }
    });
  }

 private:
  int64_t axis_;
};

class SplitKernel : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info)
      : axis_(info.attrs().get_int("axis", 0)), num_outputs_(info.attrs().get_int("num_outputs", 0)),
        split_attr_(info.attrs().get_ints("split")) {
    if (info.opset() >= 18 && num_outputs_ == 0 && !info.has_input(1))
      fail("Split-18 needs either the 'split' input or the 'num_outputs' attribute");
    if (num_outputs_ != 0 && num_outputs_ != info.num_outputs())
      fail("attribute 'num_outputs' is {}, the node has {} outputs", num_outputs_, info.num_outputs());
  }
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, static_cast<int64_t>(in.size()), "attribute 'axis'"));
    const std::vector<int64_t> sizes = split_sizes(in, ctx.has_input(1) ? &ctx.value(1) : nullptr, ctx.num_outputs());
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      Shape out = in;
      out[axis] = sizes[static_cast<size_t>(i)];
      ctx.set_output(i, ctx.dtype(0), out);
    }
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, x.rank()));
    const std::vector<int64_t> sizes =
        split_sizes(x.shape(), ctx.has_input(1) ? &ctx.input(1) : nullptr, ctx.num_outputs());
    const int64_t eb = static_cast<int64_t>(element_bytes(x.dtype(), "Split"));
    const int64_t outer = dims_product(x.shape(), 0, static_cast<int>(axis));
    const int64_t inner = dims_product(x.shape(), static_cast<int>(axis + 1), static_cast<int>(x.shape().size())) * eb;
    const int64_t row = x.shape()[axis] * inner;
    const uint8_t* in = static_cast<const uint8_t*>(x.raw());
    int64_t at = 0;
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      const int64_t chunk = sizes[static_cast<size_t>(i)] * inner;
      if (ctx.has_output(i) && chunk)
        for (int64_t o = 0; o < outer; ++o)
          std::memcpy(static_cast<uint8_t*>(ctx.output(i).raw()) + o * chunk, in + o * row + at,
                      static_cast<size_t>(chunk));
      at += chunk;
    }
  }

 private:
  std::vector<int64_t> split_sizes(const Shape& in, const Tensor* split, int n) const {
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(in.size()), "attribute 'axis'");
    const int64_t dim = in[static_cast<size_t>(axis)];
    std::vector<int64_t> sizes;
    if (split) {
      sizes = tensor_to_ints(*split);
    } else if (!split_attr_.empty()) {
      sizes = split_attr_;
    } else if (num_outputs_ > 0) {
      const int64_t chunk = ceil_div(dim, num_outputs_);  // the last chunk takes the remainder
      for (int i = 0; i < n; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - chunk * i)));
    } else {
      if (dim % n != 0) fail("axis {} of size {} does not split evenly into {} outputs", axis, dim, n);
      sizes.assign(static_cast<size_t>(n), dim / n);
    }
    if (static_cast<int>(sizes.size()) != n) fail("split has {} entries, the node has {} outputs", sizes.size(), n);
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) fail("split has a negative size ({})", s);
      total = checked_add(total, s, "the split sizes");
    }
    if (total != dim) fail("split sizes sum to {}, axis {} has size {}", total, axis, dim);
    return sizes;
  }

 private:
  int64_t axis_;
  int64_t num_outputs_;
  std::vector<int64_t> split_attr_;
};

}  // namespace

void register_concat_split_ops(OpRegistry& r) {
  r.add("", "Concat", 13, kOnnxOpsetMax, make_factory<ConcatKernel>());
  r.add_versions("", "Split", {13, 18}, make_factory<SplitKernel>());  // 18: num_outputs (the kernel reads the opset)
}

}  // namespace onebit
