// Activations with attributes (Elu, Selu, Celu, LeakyRelu, HardSigmoid,
// HardSwish, ThresholdedRelu, Softplus, Softsign, Mish, Gelu) and Clip.
//
// Each computes in the arithmetic type of its input (float for f16/bf16/f32,
// double for f64) with the formula of its ONNX schema, rearranged only where
// the literal form overflows (Softplus) or loses digits (Elu's exp(x) - 1).
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

enum class Act { Elu, Selu, Celu, LeakyRelu, HardSigmoid, HardSwish, ThresholdedRelu, Softplus, Softsign, Mish, Gelu };

// log(1 + e^x) without overflow for large x.
template <class C>
C softplus(C x) {
  return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

class ActivationKernel : public Kernel {
 public:
  ActivationKernel(const KernelInfo& info, Act act) : act_(act), name_(info.op_type()) {
    const Attributes& a = info.attrs();
    switch (act_) {
      case Act::Elu: alpha_ = a.get_float("alpha", 1.0f); break;
      case Act::Selu:
        // Defaults from the schema (the SELU paper's constants, as float32).
        alpha_ = a.get_float("alpha", 1.67326319217681884765625f);
        gamma_ = a.get_float("gamma", 1.05070102214813232421875f);
        break;
      case Act::Celu:
        alpha_ = a.get_float("alpha", 1.0f);
        if (alpha_ == 0.0f) fail("attribute 'alpha' is 0, expected a non-zero value (Celu divides by it)");
        break;
      case Act::LeakyRelu: alpha_ = a.get_float("alpha", 0.01f); break;
      case Act::HardSigmoid:
        alpha_ = a.get_float("alpha", 0.2f);
        beta_ = a.get_float("beta", 0.5f);
        break;
      case Act::ThresholdedRelu: alpha_ = a.get_float("alpha", 1.0f); break;
      case Act::Gelu: {
        const std::string approx = a.get_string("approximate", "none");
        if (approx == "tanh") tanh_gelu_ = true;
        else if (approx != "none") fail("attribute 'approximate' is '{}', expected 'none' or 'tanh'", approx);
        break;
      }
      default: break;
    }
  }

  void reshape(ReshapeContext& ctx) override {
    if (!dtype_is_float(ctx.dtype(0)))
      unsupported_dtype(fmt::format("{} input 0 (shape {})", name_, shape_str(ctx.shape(0))), ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    ThreadPool& pool = ctx.pool();
    const float alpha = alpha_, beta = beta_, gamma = gamma_;
    auto map = [&](auto f) { map_float_tensor(pool, x, y, name_, f); };
    switch (act_) {
      case Act::Elu:  // x < 0 ? alpha * (e^x - 1) : x
        return map([=](auto v) {
          using C = decltype(v);
          return v < C(0) ? C(alpha) * std::expm1(v) : v;
        });
      case Act::Selu:  // gamma * (x > 0 ? x : alpha * e^x - alpha)
        return map([=](auto v) {
          using C = decltype(v);
          return v > C(0) ? C(gamma) * v : C(gamma) * (C(alpha) * std::exp(v) - C(alpha));
        });
      case Act::Celu:  // max(0, x) + min(0, alpha * (e^(x/alpha) - 1))
        return map([=](auto v) {
          using C = decltype(v);
          const C a = C(alpha);
          return std::max(C(0), v) + std::min(C(0), a * std::expm1(v / a));
        });
      case Act::LeakyRelu:
        return map([=](auto v) {
          using C = decltype(v);
          return v < C(0) ? C(alpha) * v : v;
        });
      case Act::HardSigmoid:  // max(0, min(1, alpha * x + beta))
        return map([=](auto v) {
          using C = decltype(v);
          return std::max(C(0), std::min(C(1), C(alpha) * v + C(beta)));
        });
      case Act::HardSwish:  // x * HardSigmoid<alpha = 1/6, beta = 0.5>(x)
        return map([](auto v) {
          using C = decltype(v);
          return v * std::max(C(0), std::min(C(1), v / C(6) + C(0.5)));
        });
      case Act::ThresholdedRelu:
        return map([=](auto v) {
          using C = decltype(v);
          return v > C(alpha) ? v : C(0);
        });
      case Act::Softplus: return map([](auto v) { return softplus(v); });
      case Act::Softsign:
        return map([](auto v) {
          using C = decltype(v);
          return v / (C(1) + std::fabs(v));
        });
      case Act::Mish: return map([](auto v) { return v * std::tanh(softplus(v)); });
      case Act::Gelu:
        if (tanh_gelu_)  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
          return map([](auto v) {
            using C = decltype(v);
            const C k = C(0.7978845608028654);  // sqrt(2 / pi)
            return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
          });
        return map([](auto v) {  // 0.5 x (1 + erf(x / sqrt(2)))
          using C = decltype(v);
          return C(0.5) * v * (C(1) + std::erf(v * C(0.7071067811865476)));
        });
    }
  }

 private:
  Act act_;
  std::string name_;
  float alpha_ = 0, beta_ = 0, gamma_ = 0;
  bool tanh_gelu_ = false;
};

// Clip (opset 13): min and max are optional scalar inputs, defaulting to the
// type's lowest and highest values; min > max gives max everywhere, which is
// Min(max, Max(x, min)). NaN inputs stay NaN.
class ClipKernel : public Kernel {
 public:
  explicit ClipKernel(const KernelInfo&) {}

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!(dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8)))
      unsupported_dtype(fmt::format("Clip input 0 (shape {})", shape_str(ctx.shape(0))), t);
    for (int i : {1, 2}) {
      if (!ctx.has_input(i)) continue;
      const char* name = i == 1 ? "min" : "max";
      if (ctx.dtype(i) != t)
        fail("input {} '{}' is {}, expected {} like input 0", i, name, dtype_name(ctx.dtype(i)), dtype_name(t));
      if (numel(ctx.shape(i)) != 1)
        fail("input {} '{}' has shape {}, expected a scalar", i, name, shape_str(ctx.shape(i)));
    }
    ctx.set_output(0, t, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    dispatch_numeric(x.dtype(), "Clip", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      using C = typename A::C;
      const bool has_lo = ctx.has_input(1), has_hi = ctx.has_input(2);
      const C lo = has_lo ? A::load(ctx.input(1).data<T>()[0]) : std::numeric_limits<C>::lowest();
      const C hi = has_hi ? A::load(ctx.input(2).data<T>()[0]) : std::numeric_limits<C>::max();
      map_elements(ctx.pool(), x.data<T>(), ctx.output(0).data<T>(), x.size(), [=](T in) {
        C v = A::load(in);
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
        return A::store(v);
      });
    });
  }
};

}  // namespace

void register_activation_ops(OpRegistry& r) {
  auto add = [&](const char* name, std::initializer_list<int64_t> sinces, Act act) {
    r.add_versions("", name, sinces,
                   [act](const KernelInfo& i) { return std::make_unique<ActivationKernel>(i, act); });
  };
  // Since-versions from the schemas; the versions 22 (and LeakyRelu-16) only
  // add bfloat16.
  add("Elu", {6, 22}, Act::Elu);
  add("Selu", {6, 22}, Act::Selu);
  add("Celu", {12}, Act::Celu);
  add("LeakyRelu", {6, 16}, Act::LeakyRelu);
  add("HardSigmoid", {6, 22}, Act::HardSigmoid);
  add("HardSwish", {14, 22}, Act::HardSwish);
  add("ThresholdedRelu", {10, 22}, Act::ThresholdedRelu);
  add("Softplus", {1, 22}, Act::Softplus);
  add("Softsign", {1, 22}, Act::Softsign);
  add("Mish", {18, 22}, Act::Mish);
  add("Gelu", {20}, Act::Gelu);
  r.add("", "Clip", 13, kOnnxOpsetMax, make_factory<ClipKernel>());
}

}  // namespace onebit
