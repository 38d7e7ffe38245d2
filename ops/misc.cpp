// Small ops with one idea each: CumSum (14), Trilu (14), EyeLike (9),
// OneHot (11) and NonZero (13).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

// A scalar (or one-element) integer input such as CumSum's axis or Trilu's k.
int64_t scalar_int_input(const Tensor& t, const char* what) {
  if (t.size() != 1) fail("input '{}' has shape {}, expected a scalar", what, shape_str(t.shape()));
  if (!dtype_is_integer(t.dtype())) fail("input '{}' is {}, expected an integer", what, dtype_name(t.dtype()));
  return tensor_int_at(t, 0);
}

// CumSum(x, axis): running sums along `axis`; `exclusive` leaves each element
// out of its own sum, `reverse` runs from the end. Floats accumulate in their
// arithmetic type (float for f16/bf16), integers wrap.
class CumSumKernel : public Kernel {
 public:
  explicit CumSumKernel(const KernelInfo& info) {
    exclusive_ = info.attrs().get_int("exclusive", 0) != 0;
    reverse_ = info.attrs().get_int("reverse", 0) != 0;
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!(dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8))) unsupported_dtype("CumSum input x", t);
    if (ctx.rank(0) == 0) fail("input x is a scalar; CumSum needs at least one axis");
    if (numel(ctx.shape(1)) != 1) fail("input 'axis' has shape {}, expected a scalar", shape_str(ctx.shape(1)));
    if (const Tensor* a = ctx.value_if_known(1)) normalize_axis(scalar_int_input(*a, "axis"), ctx.rank(0), "input 'axis'");
    ctx.set_output(0, t, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int axis = static_cast<int>(normalize_axis(scalar_int_input(ctx.input(1), "axis"), X.rank(), "input 'axis'"));
    const int64_t outer = dims_product(X.shape(), 0, axis), n = X.dim(axis);
    const int64_t inner = dims_product(X.shape(), axis + 1, X.rank());
    if (outer * n * inner == 0) return;
    const bool exclusive = exclusive_, reverse = reverse_;
    dispatch_numeric(X.dtype(), "CumSum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      using C = typename A::C;
      const T* x = X.data<T>();
      T* y = ctx.output(0).data<T>();
      constexpr int64_t kChunk = 256;
      const int64_t chunks = (inner + kChunk - 1) / kChunk;
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (n * std::min(inner, kChunk)));
      ctx.pool().parallel_for(outer * chunks, grain, [&](int64_t begin, int64_t end) {
        C acc[kChunk];
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / chunks, c0 = (t % chunks) * kChunk, len = std::min(kChunk, inner - c0);
          std::fill(acc, acc + len, C(0));
          for (int64_t s = 0; s < n; ++s) {
            const int64_t k = reverse ? n - 1 - s : s;
            const int64_t at = (o * n + k) * inner + c0;
            for (int64_t c = 0; c < len; ++c) {
              const C v = A::load(x[at + c]);
              if (exclusive) {
                y[at + c] = A::store(acc[c]);
                acc[c] = wrap_add(acc[c], v);
              } else {
                acc[c] = wrap_add(acc[c], v);
                y[at + c] = A::store(acc[c]);
              }
            }
          }
        }
      });
    });
  }

 private:
  template <class C>
  static C wrap_add(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }

  bool exclusive_ = false, reverse_ = false;
};

// Trilu(input, k): keeps the upper (j - i >= k) or lower (j - i <= k)
// triangle of each trailing [N, M] matrix and zeroes the rest. Any dtype:
// only bytes move, and zero is all-zero bits for every type.
class TriluKernel : public Kernel {
 public:
  explicit TriluKernel(const KernelInfo& info) { upper_ = info.attrs().get_int("upper", 1) != 0; }

  void reshape(ReshapeContext& ctx) override {
    if (ctx.rank(0) < 2) fail("input has shape {}; Trilu needs [..., N, M]", shape_str(ctx.shape(0)));
    if (dtype_bits(ctx.dtype(0)) < 8) unsupported_dtype("Trilu input", ctx.dtype(0));
    if (ctx.has_input(1) && numel(ctx.shape(1)) != 1)
      fail("input 'k' has shape {}, expected a scalar", shape_str(ctx.shape(1)));
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int64_t k = ctx.has_input(1) ? scalar_int_input(ctx.input(1), "k") : 0;
    const int64_t rows = X.dim(X.rank() - 2), cols = X.dim(X.rank() - 1);
    const int64_t mats = dims_product(X.shape(), 0, X.rank() - 2);
    const bool upper = upper_;
    dispatch_width(X.dtype(), "Trilu", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = X.data<T>();
      T* y = ctx.output(0).data<T>();
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1));
      ctx.pool().parallel_for(mats * rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t i = r % rows;
          const T* px = x + r * cols;
          T* py = y + r * cols;
          for (int64_t j = 0; j < cols; ++j) {
            const bool keep = upper ? j - i >= k : j - i <= k;
            py[j] = keep ? px[j] : T(0);
          }
        }
      });
    });
  }

 private:
  bool upper_ = true;
};

// EyeLike(input): ones on diagonal k of a 2-D tensor shaped like the input,
// of the input's type or attribute `dtype`. Reads only the input's shape.
class EyeLikeKernel : public Kernel {
 public:
  explicit EyeLikeKernel(const KernelInfo& info) {
    k_ = info.attrs().get_int("k", 0);
    const int64_t dt = info.attrs().get_int("dtype", 0);
    if (dt != 0) {
      if (!dtype_supported(static_cast<int32_t>(dt)) || dtype_bits(static_cast<DType>(dt)) < 8)
        fail("attribute 'dtype' is {}, which EyeLike cannot produce", dt);
      dtype_ = static_cast<DType>(dt);
    }
  }

  void reshape(ReshapeContext& ctx) override {
    if (ctx.rank(0) != 2) fail("input has shape {}; EyeLike needs a 2-D input", shape_str(ctx.shape(0)));
    const DType t = dtype_ != DType::Undefined ? dtype_ : ctx.dtype(0);
    if (dtype_bits(t) < 8) unsupported_dtype("EyeLike output", t);
    ctx.set_output(0, t, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    Tensor& Y = ctx.output(0);
    const int64_t rows = Y.dim(0), cols = Y.dim(1), k = k_;
    if (Y.bytes()) std::memset(Y.raw(), 0, Y.bytes());
    dispatch_any(Y.dtype(), "EyeLike", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* y = Y.data<T>();
      const T one = Arith<T>::store(static_cast<typename Arith<T>::C>(1));
      if (k >= cols || k <= -rows) return;  // no diagonal inside; also keeps i + k from overflowing
      for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i) y[i * cols + i + k] = one;
    });
  }

  bool needs_input_data(int) const override { return false; }

 private:
  int64_t k_ = 0;
  DType dtype_ = DType::Undefined;
};

// OneHot(indices, depth, values = [off, on]): a new axis of size depth with
// `on` at each index. Indices in [-depth, -1] count from the end; others out
// of [0, depth) give all `off` (spec). Float indices truncate, as in ONNX
// Runtime.
class OneHotKernel : public Kernel {
 public:
  explicit OneHotKernel(const KernelInfo& info) { axis_ = info.attrs().get_int("axis", -1); }

  void reshape(ReshapeContext& ctx) override {
    const DType it = ctx.dtype(0);
    if (!(dtype_is_float(it) || (dtype_is_integer(it) && dtype_bits(it) >= 8)))
      unsupported_dtype("OneHot input 'indices'", it);
    if (numel(ctx.shape(2)) != 2)
      fail("input 'values' has shape {}, expected [2] (off_value, on_value)", shape_str(ctx.shape(2)));
    if (dtype_bits(ctx.dtype(2)) < 8) unsupported_dtype("OneHot input 'values'", ctx.dtype(2));
    const int64_t depth = depth_of(ctx.value(1));
    Shape out = ctx.shape(0);
    const int axis = static_cast<int>(normalize_axis(axis_, ctx.rank(0) + 1, "attribute 'axis'"));
    out.insert(out.begin() + axis, depth);
    ctx.set_output(0, ctx.dtype(2), std::move(out));
  }

  void run(RunContext& ctx) override {
    const Tensor& I = ctx.input(0);
    const int64_t depth = depth_of(ctx.input(1));
    const int axis = static_cast<int>(normalize_axis(axis_, I.rank() + 1, "attribute 'axis'"));
    const int64_t outer = dims_product(I.shape(), 0, axis), inner = dims_product(I.shape(), axis, I.rank());
    Tensor& Y = ctx.output(0);
    dispatch_width(Y.dtype(), "OneHot", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T off = ctx.input(2).data<T>()[0], on = ctx.input(2).data<T>()[1];
      T* y = Y.data<T>();
      std::fill(y, y + Y.size(), off);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const double v = tensor_double_at(I, o * inner + i);
          if (!(v > -9.0e18 && v < 9.0e18)) continue;  // NaN or past int64: out of range, all off
          int64_t idx = static_cast<int64_t>(v);
          if (idx < 0) idx += depth;
          if (idx >= 0 && idx < depth) y[(o * depth + idx) * inner + i] = on;
        }
    });
  }

 private:
  static int64_t depth_of(const Tensor& d) {
    if (d.size() != 1) fail("input 'depth' has shape {}, expected a scalar", shape_str(d.shape()));
    const double v = tensor_double_at(d, 0);
    if (!(v >= 1 && v < 9.0e18)) fail("input 'depth' is {}, expected a positive number that fits int64", v);
    return static_cast<int64_t>(v);
  }

  int64_t axis_ = -1;
};

// NonZero(X): the coordinates of the non-zero elements, [rank, count], in
// row-major order. The count depends on the data, so the session plans this
// node at run time with X's values known.
class NonZeroKernel : public Kernel {
 public:
  explicit NonZeroKernel(const KernelInfo&) {}

  bool shape_depends_on_data() const override { return true; }

  void reshape(ReshapeContext& ctx) override {
    if (dtype_bits(ctx.dtype(0)) < 8) unsupported_dtype("NonZero input", ctx.dtype(0));
    // A scalar gives [0, count] (spec), not numpy's [1, count].
    ctx.set_output(0, DType::I64, {ctx.rank(0), count(ctx.value(0))});
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    int64_t* y = ctx.output(0).data<int64_t>();
    const int64_t nnz = ctx.output(0).dim(1), rank = X.rank();
    int64_t at = 0;
    for_each_nonzero(X, [&](int64_t flat) {
      int64_t rest = flat;
      for (int64_t d = rank; d-- > 0;) {
        y[d * nnz + at] = rest % X.dim(static_cast<int>(d));
        rest /= X.dim(static_cast<int>(d));
      }
      ++at;
    });
  }

 private:
  template <class F>
  static void for_each_nonzero(const Tensor& X, F f) {
    dispatch_any(X.dtype(), "NonZero", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = X.data<T>();
      for (int64_t i = 0; i < X.size(); ++i)
        if (Arith<T>::load(x[i]) != typename Arith<T>::C(0)) f(i);
    });
  }
  static int64_t count(const Tensor& X) {
    int64_t n = 0;
    for_each_nonzero(X, [&](int64_t) { ++n; });
    return n;
  }
};

}  // namespace

void register_misc_ops(OpRegistry& r) {
  r.add_versions("", "CumSum", {11, 14}, make_factory<CumSumKernel>());  // 14: more types
  r.add("", "Trilu", 14, kOnnxOpsetMax, make_factory<TriluKernel>());
  r.add_versions("", "EyeLike", {9, 22}, make_factory<EyeLikeKernel>());  // 22: bfloat16
  r.add("", "OneHot", 11, kOnnxOpsetMax, make_factory<OneHotKernel>());
  r.add("", "NonZero", 13, kOnnxOpsetMax, make_factory<NonZeroKernel>());
}

}  // namespace onebit
