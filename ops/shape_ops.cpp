// Ops that compute or change shapes without touching element values:
// Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Constant,
// ConstantOfShape, Range. Reshape-like ops alias their input's storage.
#include <cmath>
#include <cstring>

#include "base/sizes.h"
#include "ops/axis.h"
#include "ops/dispatch.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

void copy_if_moved(RunContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.raw() != in.raw() && in.bytes()) std::memcpy(out.raw(), in.raw(), in.bytes());
}

class ShapeKernel : public Kernel {
 public:
  explicit ShapeKernel(const KernelInfo& info)
      : start_(info.attrs().get_int("start", 0)), end_(info.attrs().get_int("end", INT64_MAX)) {
    info.refuse_before("start", 15);
    info.refuse_before("end", 15);
  }
  bool needs_input_data(int) const override { return false; }
  void reshape(ReshapeContext& ctx) override {
    range(ctx.rank(0), b_, e_);
    ctx.set_output(0, DType::I64, {e_ - b_});
  }
  void run(RunContext& ctx) override {
    const Shape& s = ctx.input(0).shape();
    int64_t b, e;
    range(static_cast<int64_t>(s.size()), b, e);
    int64_t* y = ctx.output(0).data<int64_t>();
    for (int64_t i = b; i < e; ++i) y[i - b] = s[static_cast<size_t>(i)];
  }

 private:
  // Shape-15 start/end: negative counts from the back, both clamp to [0, rank].
  void range(int64_t rank, int64_t& b, int64_t& e) const {
    b = start_ < 0 ? start_ + rank : start_;
    e = end_ < 0 ? end_ + rank : end_;
    b = std::clamp<int64_t>(b, 0, rank);
    e = std::clamp<int64_t>(e, 0, rank);
    if (e < b) e = b;
  }
  int64_t start_, end_;
  int64_t b_ = 0, e_ = 0;
};

class SizeKernel : public Kernel {
 public:
  explicit SizeKernel(const KernelInfo&) {}
  bool needs_input_data(int) const override { return false; }
  void reshape(ReshapeContext& ctx) override { ctx.set_output(0, DType::I64, {}); }
  void run(RunContext& ctx) override { *ctx.output(0).data<int64_t>() = numel(ctx.input(0).shape()); }
};

class ReshapeKernel : public Kernel {
 public:
  explicit ReshapeKernel(const KernelInfo& info) : allowzero_(info.attrs().get_int("allowzero", 0) != 0) {
    info.refuse_before("allowzero", 14);
  }
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const Tensor& spec = ctx.value(1);
    if (spec.rank() != 1) fail("shape input must be 1-D, got {}", shape_str(spec.shape()));
    Shape out(static_cast<size_t>(spec.size()));
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t d = tensor_int_at(spec, static_cast<int64_t>(i));
      if (d == 0 && !allowzero_) {
        if (i >= in.size()) fail("shape {} copies dim {} (0) but the input {} has rank {}", shape_str(tensor_to_ints(spec)), i, shape_str(in), in.size());
        d = in[i];
      }
      if (d == -1) {
        if (infer >= 0) fail("shape {} has more than one -1", shape_str(tensor_to_ints(spec)));
        infer = static_cast<int>(i);
        continue;
      }
      if (d < 0) fail("shape {} has invalid dim {}", shape_str(tensor_to_ints(spec)), d);
      out[i] = d;
      if (__builtin_mul_overflow(known, d, &known) || known > kMaxElements)
        fail("shape {} has more elements than the input {} ({})", shape_str(tensor_to_ints(spec)), shape_str(in),
             numel(in));
    }
    const int64_t total = numel(in);
    if (infer >= 0) {
      if (known == 0 || total % known != 0)
        fail("cannot reshape {} ({} elements) to {}", shape_str(in), total, shape_str(tensor_to_ints(spec)));
      out[static_cast<size_t>(infer)] = total / known;
    } else if (known != total) {
      fail("cannot reshape {} ({} elements) to {} ({} elements)", shape_str(in), total, shape_str(out), known);
    }
    ctx.alias_output(0, 0, out);
  }
  void run(RunContext& ctx) override { copy_if_moved(ctx); }

 private:
  bool allowzero_;
};

class FlattenKernel : public Kernel {
 public:
  explicit FlattenKernel(const KernelInfo& info) : axis_(info.attrs().get_int("axis", 1)) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    if (axis_ < -rank || axis_ > rank) fail("attribute 'axis' is {}, out of range for rank {}", axis_, rank);
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= in[static_cast<size_t>(d)];
    ctx.alias_output(0, 0, {outer, inner});
  }
  void run(RunContext& ctx) override { copy_if_moved(ctx); }

 private:
  int64_t axis_;
};

// Squeeze and Unsqueeze take axes from an input (opset 13+).
class SqueezeKernel : public Kernel {
 public:
  explicit SqueezeKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(in.size());
    std::vector<bool> drop(in.size(), false);
    if (ctx.has_input(1)) {
      for (int64_t a : tensor_to_ints(ctx.value(1))) {
        const int64_t axis = normalize_axis(a, rank, "axis");
        if (in[static_cast<size_t>(axis)] != 1)
          fail("cannot squeeze axis {} of {}: its size is {}, not 1", a, shape_str(in), in[static_cast<size_t>(axis)]);
        drop[static_cast<size_t>(axis)] = true;
      }
    } else {
      for (size_t d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
    }
    Shape out;
    for (size_t d = 0; d < in.size(); ++d)
      if (!drop[d]) out.push_back(in[d]);
    ctx.alias_output(0, 0, out);
  }
  void run(RunContext& ctx) override { copy_if_moved(ctx); }
};

class UnsqueezeKernel : public Kernel {
 public:
  explicit UnsqueezeKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> axes = tensor_to_ints(ctx.value(1));
    const int64_t rank = static_cast<int64_t>(in.size() + axes.size());
    std::vector<bool> inserted(static_cast<size_t>(rank), false);
    for (int64_t a : axes) {
      const int64_t axis = normalize_axis(a, rank, "axis");
      if (inserted[static_cast<size_t>(axis)]) fail("axis {} is repeated in the axes input", a);
      inserted[static_cast<size_t>(axis)] = true;
    }
    Shape out;
    size_t k = 0;
    for (int64_t d = 0; d < rank; ++d) out.push_back(inserted[static_cast<size_t>(d)] ? 1 : in[k++]);
    ctx.alias_output(0, 0, out);
  }
  void run(RunContext& ctx) override { copy_if_moved(ctx); }
};

// Constant: the value comes from exactly one attribute.
class ConstantKernel : public Kernel {
 public:
  explicit ConstantKernel(const KernelInfo& info) : value_(constant_node_value(info.attrs())) {}
  void reshape(ReshapeContext& ctx) override { ctx.set_output(0, value_.dtype(), value_.shape()); }
  void run(RunContext& ctx) override {
    if (value_.bytes()) std::memcpy(ctx.output(0).raw(), value_.raw(), value_.bytes());
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const KernelInfo& info) {
    if (const Tensor* t = info.attrs().get_tensor("value")) {
      if (t->size() != 1) fail("attribute 'value' must hold one element, holds {}", t->size());
      value_ = *t;
    } else {
      value_ = Tensor::allocate(DType::F32, {1});
    }
  }
  void reshape(ReshapeContext& ctx) override {
    Shape out = tensor_to_ints(ctx.value(0));
    if (checked_numel(out) < 0) fail("shape {} is invalid", shape_str(out));
    ctx.set_output(0, value_.dtype(), out);
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_width(y.dtype(), "ConstantOfShape", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v;
      std::memcpy(&v, value_.raw(), sizeof(T));
      std::fill_n(y.data<T>(), y.size(), v);
    });
  }

 private:
  Tensor value_;
};

class RangeKernel : public Kernel {
 public:
  explicit RangeKernel(const KernelInfo& info) {
    // stash_type (opset 27): the precision of start + i·delta for 16-bit
    // floats; 1 (float32, the default) is what the loop below computes in.
    const int64_t stash = info.attrs().get_int("stash_type", 1);
    info.refuse_before("stash_type", 27);
    if (stash != 1) fail("attribute 'stash_type' is {}, expected 1 (float32)", stash);
    v27_ = info.opset() >= 27;
  }
  void reshape(ReshapeContext& ctx) override {
    if (!v27_ && (ctx.dtype(0) == DType::F16 || ctx.dtype(0) == DType::BF16))
      fail("input 0 is {}: Range takes 16-bit floats from ai.onnx opset 27", dtype_name(ctx.dtype(0)));
    for (int i = 0; i < 3; ++i) {
      if (ctx.rank(i) != 0 && numel(ctx.shape(i)) != 1) fail("input {} must be a scalar, got {}", i, shape_str(ctx.shape(i)));
      if (ctx.dtype(i) != ctx.dtype(0))
        fail("input {} is {}, input 0 is {}; Range needs one type", i, dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0)));
    }
    const double start = tensor_double_at(ctx.value(0), 0), limit = tensor_double_at(ctx.value(1), 0),
                 delta = tensor_double_at(ctx.value(2), 0);
    if (delta == 0) fail("delta is 0");
    const double n = std::ceil((limit - start) / delta);
    if (!(n < 1e12)) fail("Range({}, {}, {}) is too long", start, limit, delta);
    ctx.set_output(0, ctx.dtype(0), {n > 0 ? static_cast<int64_t>(n) : 0});  // n may be -inf: no cast then
  }
  void run(RunContext& ctx) override {
    Tensor& y = ctx.output(0);
    dispatch_numeric(y.dtype(), "Range", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      // Accumulate as the spec's reference loop does: start + i * delta in T.
      const auto start = A::load(ctx.input(0).data<T>()[0]);
      const auto delta = A::load(ctx.input(2).data<T>()[0]);
      T* out = y.data<T>();
      for (int64_t i = 0; i < y.size(); ++i) {
        if constexpr (std::is_integral_v<typename A::C>) {
          // In the unsigned type: wraps as the spec's loop in T would, defined.
          using U = std::make_unsigned_t<typename A::C>;
          out[i] = static_cast<T>(static_cast<U>(static_cast<U>(start) + static_cast<U>(i) * static_cast<U>(delta)));
        } else {
          out[i] = A::store(static_cast<typename A::C>(start + static_cast<typename A::C>(i) * delta));
        }
      }
    });
  }

 private:
  bool v27_ = false;
};

}  // namespace

void register_shape_ops(OpRegistry& r) {
  // Versions 19, 21, 23, 24 and 25 of these add types (float8, 4-bit,
  // float4e2m1, float8e8m0, 2-bit); the kernels move bytes of any held type.
  r.add_versions("", "Shape", {13, 15, 19, 21, 23, 24, 25}, make_factory<ShapeKernel>());  // 15: start, end
  r.add_versions("", "Size", {13, 19, 21, 23, 24, 25}, make_factory<SizeKernel>());
  r.add_versions("", "Reshape", {13, 14, 19, 21, 23, 24, 25}, make_factory<ReshapeKernel>());  // 14: allowzero
  r.add_versions("", "Flatten", {13, 21, 23, 24, 25}, make_factory<FlattenKernel>());
  r.add_versions("", "Squeeze", {13, 21, 23, 24, 25}, make_factory<SqueezeKernel>());
  r.add_versions("", "Unsqueeze", {13, 21, 23, 24, 25}, make_factory<UnsqueezeKernel>());
  r.add_versions("", "Constant", {13, 19, 21, 23, 24, 25}, make_factory<ConstantKernel>());
  r.add_versions("", "ConstantOfShape", {9, 20, 21, 23, 24, 25}, make_factory<ConstantOfShapeKernel>());
  // Range-27 adds float16/bfloat16 and stash_type, the precision of start + i·delta.
  r.add_versions("", "Range", {11, 27}, make_factory<RangeKernel>());
}

}  // namespace onebit
