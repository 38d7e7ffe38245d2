// Elementwise unary math (ONNX "Abs", "Exp", ..., "IsInf") and Identity.
//
// Floats compute in their arithmetic type (float for f16/bf16/f32, double for
// f64) with the C library function the spec names, and round once on store.
// Integer negation wraps (two's complement), as NumPy does for Abs/Neg of the
// most negative value.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "quant/ukernels/kernel_config.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

enum class UOp {
  Abs, Neg, Exp, Log, Sqrt, Reciprocal, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Tanh,
  Sigmoid, Relu, Erf, Floor, Ceil, Round, Sign, Not, BitwiseNot, IsNaN, IsInf
};

// Which input types an op accepts (the spec's type constraint, widened to
// every type the loop is correct for).
enum class Accepts { Float, Numeric, Bool, Integer };

Accepts accepts(UOp op) {
  switch (op) {
    case UOp::Abs:
    case UOp::Neg:
    case UOp::Relu:
    case UOp::Sign: return Accepts::Numeric;
    case UOp::Not: return Accepts::Bool;
    case UOp::BitwiseNot: return Accepts::Integer;
    default: return Accepts::Float;
  }
}

// 0 - v without signed overflow: the most negative value maps to itself.
template <class C>
C wrapping_negate(C v) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(U(0) - static_cast<U>(v)));
  } else {
    return -v;
  }
}

template <class F>
void map_float(RunContext& ctx, std::string_view name, F f) {
  map_float_tensor(ctx.pool(), ctx.input(0), ctx.output(0), name, f);
}

// The same over any numeric tensor.
template <class F>
void map_numeric(RunContext& ctx, std::string_view name, F f) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  dispatch_numeric(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Arith<T>;
    map_elements(ctx.pool(), x.data<T>(), y.data<T>(), x.size(), [&](T v) { return A::store(f(A::load(v))); });
  });
}

// Float tensor -> bool tensor.
template <class F>
void test_float(RunContext& ctx, std::string_view name, F f) {
  const Tensor& x = ctx.input(0);
  dispatch_float(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_elements(ctx.pool(), x.data<T>(), ctx.output(0).data<bool>(), x.size(),
                 [&](T v) { return f(Arith<T>::load(v)); });
  });
}

class UnaryKernel : public Kernel {
 public:
  UnaryKernel(const KernelInfo& info, UOp op) : op_(op), name_(info.op_type()) {
    if (op_ == UOp::IsInf) {
      detect_negative_ = info.attrs().get_int("detect_negative", 1) != 0;
      detect_positive_ = info.attrs().get_int("detect_positive", 1) != 0;
    }
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    bool ok = false;
    switch (accepts(op_)) {
      case Accepts::Float: ok = dtype_is_float(t); break;
      case Accepts::Numeric: ok = dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8); break;
      case Accepts::Bool: ok = t == DType::Bool; break;
      case Accepts::Integer: ok = dtype_is_integer(t) && dtype_bits(t) >= 8; break;
    }
    if (!ok) unsupported_dtype(fmt::format("{} input 0 (shape {})", name_, shape_str(ctx.shape(0))), t);
    const bool predicate = op_ == UOp::IsNaN || op_ == UOp::IsInf;
    ctx.set_output(0, predicate ? DType::Bool : t, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const std::string_view n = name_;
    switch (op_) {
      case UOp::Abs:
        return map_numeric(ctx, n, [](auto v) {
          if constexpr (std::is_unsigned_v<decltype(v)>) return v;
          else return v < decltype(v)(0) ? wrapping_negate(v) : v;
        });
      case UOp::Neg: return map_numeric(ctx, n, [](auto v) { return wrapping_negate(v); });
      case UOp::Exp: return map_float(ctx, n, [](auto v) { return std::exp(v); });
      case UOp::Log: return map_float(ctx, n, [](auto v) { return std::log(v); });
      case UOp::Sqrt: return map_float(ctx, n, [](auto v) { return std::sqrt(v); });
      case UOp::Reciprocal: return map_float(ctx, n, [](auto v) { return decltype(v)(1) / v; });
      case UOp::Sin: return map_float(ctx, n, [](auto v) { return std::sin(v); });
      case UOp::Cos: return map_float(ctx, n, [](auto v) { return std::cos(v); });
      case UOp::Tan: return map_float(ctx, n, [](auto v) { return std::tan(v); });
      case UOp::Asin: return map_float(ctx, n, [](auto v) { return std::asin(v); });
      case UOp::Acos: return map_float(ctx, n, [](auto v) { return std::acos(v); });
      case UOp::Atan: return map_float(ctx, n, [](auto v) { return std::atan(v); });
      case UOp::Sinh: return map_float(ctx, n, [](auto v) { return std::sinh(v); });
      case UOp::Cosh: return map_float(ctx, n, [](auto v) { return std::cosh(v); });
      case UOp::Asinh: return map_float(ctx, n, [](auto v) { return std::asinh(v); });
      case UOp::Acosh: return map_float(ctx, n, [](auto v) { return std::acosh(v); });
      case UOp::Atanh: return map_float(ctx, n, [](auto v) { return std::atanh(v); });
      case UOp::Tanh: return map_float(ctx, n, [](auto v) { return std::tanh(v); });
      case UOp::Sigmoid:
        // float32 (SiLU in every MLP): the vectorized exponential.
        if (ctx.input(0).dtype() == DType::F32) {
          const float* x = ctx.input(0).data<float>();
          float* y = ctx.output(0).data<float>();
          const F32VUnaryUkernel sigmoid = vec_math_config().sigmoid;
          ctx.pool().parallel_for(ctx.input(0).size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
            sigmoid(static_cast<size_t>(e - b), x + b, y + b);
          });
          return;
        }
        // float16: widened a run at a time through the same vectorized kernel.
        if (ctx.input(0).dtype() == DType::F16) {
          const uint16_t* x = ctx.input(0).data<uint16_t>();
          uint16_t* y = ctx.output(0).data<uint16_t>();
          const VecMathConfig& vm = vec_math_config();
          ctx.pool().parallel_for(ctx.input(0).size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
            float run[256];
            for (int64_t i = b; i < e; i += 256) {
              const size_t n = static_cast<size_t>(std::min<int64_t>(256, e - i));
              vm.widen(n, x + i, run);
              vm.sigmoid(n, run, run);
              vm.narrow(n, run, y + i);
            }
          });
          return;
        }
        // Other types: 1 / (1 + e^-x), written per sign so the exponential
        // never overflows: for x < 0, e^x / (1 + e^x).
        return map_float(ctx, n, [](auto v) {
          using C = decltype(v);
          if (v >= C(0)) return C(1) / (C(1) + std::exp(-v));
          const C e = std::exp(v);
          return e / (C(1) + e);
        });
      case UOp::Relu:  // max(0, x); NaN stays NaN
        return map_numeric(ctx, n, [](auto v) {
          if constexpr (std::is_unsigned_v<decltype(v)>) return v;
          else return v < decltype(v)(0) ? decltype(v)(0) : v;
        });
      case UOp::Erf: return map_float(ctx, n, [](auto v) { return std::erf(v); });
      case UOp::Floor: return map_float(ctx, n, [](auto v) { return std::floor(v); });
      case UOp::Ceil: return map_float(ctx, n, [](auto v) { return std::ceil(v); });
      case UOp::Round:  // halves to even (spec: round([2.5]) = 2, round([-4.5]) = -4)
        return map_float(ctx, n, [](auto v) { return round_half_even(v); });
      case UOp::Sign:  // -1, 0 or 1; NaN stays NaN
        return map_numeric(ctx, n, [](auto v) {
          using C = decltype(v);
          if constexpr (std::is_unsigned_v<C>) return v > C(0) ? C(1) : C(0);
          else return v > C(0) ? C(1) : v < C(0) ? C(-1) : v;
        });
      case UOp::Not: {
        const Tensor& x = ctx.input(0);
        return map_elements(ctx.pool(), x.data<bool>(), ctx.output(0).data<bool>(), x.size(), [](bool v) { return !v; });
      }
      case UOp::BitwiseNot: {
        const Tensor& x = ctx.input(0);
        return dispatch_integer(x.dtype(), n, [&](auto tag) {
          using T = typename decltype(tag)::type;
          map_elements(ctx.pool(), x.data<T>(), ctx.output(0).data<T>(), x.size(),
                       [](T v) { return static_cast<T>(~v); });
        });
      }
      case UOp::IsNaN: return test_float(ctx, n, [](auto v) { return std::isnan(v); });
      case UOp::IsInf: {
        const bool neg = detect_negative_, pos = detect_positive_;
        return test_float(ctx, n, [neg, pos](auto v) { return std::isinf(v) && (v > 0 ? pos : neg); });
      }
    }
  }

 private:
  UOp op_;
  std::string name_;
  bool detect_negative_ = true, detect_positive_ = true;
};

// Identity: the output is the input's bytes; the session may alias them.
class IdentityKernel : public Kernel {
 public:
  explicit IdentityKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    if (!dtype_supported(ctx.dtype(0))) unsupported_dtype("Identity input 0", ctx.dtype(0));
    ctx.alias_output(0, 0, ctx.shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.raw() != x.raw() && x.bytes() != 0) std::memcpy(y.raw(), x.raw(), x.bytes());
  }
};

}  // namespace

void register_unary_ops(OpRegistry& r) {
  struct Entry {
    const char* name;
    int64_t since;  // last schema version at or below 21
    UOp op;
    bool v22 = false;  // a version 22 exists (it adds bfloat16 only)
  };
  // Since-versions from the operator schemas.
  static const Entry entries[] = {
      {"Abs", 13, UOp::Abs},       {"Neg", 13, UOp::Neg},          {"Exp", 13, UOp::Exp},
      {"Log", 13, UOp::Log},       {"Sqrt", 13, UOp::Sqrt},        {"Reciprocal", 13, UOp::Reciprocal},
      {"Sin", 7, UOp::Sin, true},      {"Cos", 7, UOp::Cos, true},       {"Tan", 7, UOp::Tan, true},
      {"Asin", 7, UOp::Asin, true},    {"Acos", 7, UOp::Acos, true},     {"Atan", 7, UOp::Atan, true},
      {"Sinh", 9, UOp::Sinh, true},    {"Cosh", 9, UOp::Cosh, true},     {"Asinh", 9, UOp::Asinh, true},
      {"Acosh", 9, UOp::Acosh, true},  {"Atanh", 9, UOp::Atanh, true},   {"Tanh", 13, UOp::Tanh},
      {"Sigmoid", 13, UOp::Sigmoid}, {"Erf", 13, UOp::Erf},
      {"Floor", 13, UOp::Floor},   {"Ceil", 13, UOp::Ceil},        {"Round", 11, UOp::Round, true},
      {"Sign", 13, UOp::Sign},     {"Not", 1, UOp::Not},           {"BitwiseNot", 18, UOp::BitwiseNot},
  };
  for (const Entry& e : entries) {
    const UOp op = e.op;
    const KernelFactory make = [op](const KernelInfo& i) { return std::make_unique<UnaryKernel>(i, op); };
    if (e.v22) r.add_versions("", e.name, {e.since, 22}, make);
    else r.add("", e.name, e.since, kOnnxOpsetMax, make);
  }
  // Relu-14 adds 8/16-bit integers; the same kernel.
  r.add_versions("", "Relu", {13, 14}, [](const KernelInfo& i) { return std::make_unique<UnaryKernel>(i, UOp::Relu); });
  // IsNaN and IsInf gained float8 inputs at 20 (not held by 1bit); same kernel.
  for (auto [since, until] : {std::pair<int64_t, int64_t>{13, 19}, {20, kOnnxOpsetMax}})
    r.add("", "IsNaN", since, until, [](const KernelInfo& i) { return std::make_unique<UnaryKernel>(i, UOp::IsNaN); });
  for (auto [since, until] : {std::pair<int64_t, int64_t>{10, 19}, {20, kOnnxOpsetMax}})
    r.add("", "IsInf", since, until, [](const KernelInfo& i) { return std::make_unique<UnaryKernel>(i, UOp::IsInf); });
  // Identity versions 14 and 16 add sequence and optional values (not held),
  // 19, 21, 23, 24 and 25 types (float8, 4-bit, float4e2m1, float8e8m0,
  // 2-bit); one kernel.
  r.add_versions("", "Identity", {13, 14, 16, 19, 21, 23, 24, 25}, make_factory<IdentityKernel>());
}

}  // namespace onebit
