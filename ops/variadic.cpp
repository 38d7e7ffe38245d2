// N-ary elementwise ops with multidirectional broadcasting (Sum, Mean, Max,
// Min; opset 13) and Where (opset 16).
#include <algorithm>
#include <vector>

#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

enum class Nary { Sum, Mean, Max, Min };

// Elements of one inner run combined at a time, in the arithmetic type.
constexpr int64_t kChunk = 256;

class NaryKernel : public Kernel {
 public:
  NaryKernel(const KernelInfo& info, Nary op) : op_(op), name_(info.op_type()) {
    if (info.num_inputs() < 1) fail("{} needs at least one input, got none", name_);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    const bool float_only = op_ == Nary::Sum || op_ == Nary::Mean;
    const bool ok = dtype_is_float(t) || (!float_only && dtype_is_integer(t) && dtype_bits(t) >= 8);
    if (!ok) unsupported_dtype(fmt::format("{} input 0", name_), t);
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) fail("input {} is missing; {} takes no optional inputs", i, name_);
      if (ctx.dtype(i) != t)
        fail("input {} is {}, input 0 is {}; {} needs one type", i, dtype_name(ctx.dtype(i)), dtype_name(t), name_);
      shapes.push_back(ctx.shape(i));
    }
    ctx.set_output(0, t, broadcast_shapes(shapes));
  }

  void run(RunContext& ctx) override {
    dispatch_numeric(ctx.input(0).dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      switch (op_) {
        case Nary::Sum:
        case Nary::Mean: return combine<T>(ctx, [](auto a, auto b) { return a + b; });
        case Nary::Max:  // NaN in any input gives NaN, as numpy.maximum
          return combine<T>(ctx, [](auto a, auto b) { return (b > a || b != b) ? b : a; });
        case Nary::Min: return combine<T>(ctx, [](auto a, auto b) { return (b < a || b != b) ? b : a; });
      }
    });
  }

 private:
  template <class T, class F>
  void combine(RunContext& ctx, F f) {
    using A = Arith<T>;
    using C = typename A::C;
    const size_t n = static_cast<size_t>(ctx.num_inputs());
    std::vector<Shape> shapes(n);
    std::vector<const T*> in(n);
    for (size_t i = 0; i < n; ++i) {
      shapes[i] = ctx.input(static_cast<int>(i)).shape();
      in[i] = ctx.input(static_cast<int>(i)).template data<T>();
    }
    Tensor& Y = ctx.output(0);
    const BroadcastPlan plan(shapes, Y.shape());
    T* y = Y.data<T>();
    const int64_t inner = plan.inner();
    const bool mean = op_ == Nary::Mean;
    const C count = static_cast<C>(n);
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
    ctx.pool().parallel_for(plan.outer(), grain, [&](int64_t begin, int64_t end) {
      C acc[kChunk];
      for (int64_t o = begin; o < end; ++o) {
        for (int64_t k0 = 0; k0 < inner; k0 += kChunk) {
          const int64_t len = std::min(kChunk, inner - k0);
          for (size_t i = 0; i < n; ++i) {
            const T* p = in[i] + plan.offset(i, o);
            const int64_t step = plan.inner_step(i) ? 1 : 0;
            p += step * k0;
            if (i == 0)
              for (int64_t k = 0; k < len; ++k) acc[k] = A::load(p[k * step]);
            else
              for (int64_t k = 0; k < len; ++k) acc[k] = static_cast<C>(f(acc[k], A::load(p[k * step])));
          }
          T* py = y + o * inner + k0;
          if (mean)
            for (int64_t k = 0; k < len; ++k) py[k] = A::store(static_cast<C>(acc[k] / count));
          else
            for (int64_t k = 0; k < len; ++k) py[k] = A::store(acc[k]);
        }
      }
    });
  }

  Nary op_;
  std::string name_;
};

// Where(condition, X, Y): X where the condition holds, else Y; any dtype.
class WhereKernel : public Kernel {
 public:
  explicit WhereKernel(const KernelInfo&) {}

  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(0) != DType::Bool) fail("input 0 'condition' is {}, expected bool", dtype_name(ctx.dtype(0)));
    if (ctx.dtype(1) != ctx.dtype(2))
      fail("inputs X and Y are {} and {}; Where needs one type", dtype_name(ctx.dtype(1)), dtype_name(ctx.dtype(2)));
    if (dtype_bits(ctx.dtype(1)) < 8) unsupported_dtype("Where input X", ctx.dtype(1));
    ctx.set_output(0, ctx.dtype(1), broadcast_shapes({ctx.shape(0), ctx.shape(1), ctx.shape(2)}));
  }

  void run(RunContext& ctx) override {
    // Only bytes move, so dispatch on element width.
    dispatch_width(ctx.input(1).dtype(), "Where", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Tensor &C = ctx.input(0), &X = ctx.input(1), &Yin = ctx.input(2);
      Tensor& Out = ctx.output(0);
      const BroadcastPlan plan({C.shape(), X.shape(), Yin.shape()}, Out.shape());
      const bool* c = C.data<bool>();
      const T* x = X.data<T>();
      const T* yv = Yin.data<T>();
      T* out = Out.data<T>();
      const int64_t inner = plan.inner();
      const int64_t sc = plan.inner_step(0), sx = plan.inner_step(1), sy = plan.inner_step(2);
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1));
      ctx.pool().parallel_for(plan.outer(), grain, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          const bool* pc = c + plan.offset(0, o);
          const T* px = x + plan.offset(1, o);
          const T* py = yv + plan.offset(2, o);
          T* po = out + o * inner;
          for (int64_t k = 0; k < inner; ++k) po[k] = pc[k * sc] ? px[k * sx] : py[k * sy];
        }
      });
    });
  }
};

}  // namespace

void register_variadic_ops(OpRegistry& r) {
  auto add = [&](const char* name, Nary op) {
    r.add("", name, 13, kOnnxOpsetMax, [op](const KernelInfo& i) { return std::make_unique<NaryKernel>(i, op); });
  };
  add("Sum", Nary::Sum);
  add("Mean", Nary::Mean);
  add("Max", Nary::Max);
  add("Min", Nary::Min);
  r.add_versions("", "Where", {9, 16}, make_factory<WhereKernel>());  // 16: bfloat16
}

}  // namespace onebit
