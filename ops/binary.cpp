// Broadcasting binary ops: arithmetic (Add, Sub, Mul, Div, Mod, Pow, PRelu),
// comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual) and logic
// (And, Or, Xor, BitwiseAnd/Or/Xor, BitShift).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "ops/int_arith.h"
#include "quant/ukernels/kernel_config.h"
#include "graph/op_registry.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

// Elements a thread takes at least when inputs of one shape run flat.
constexpr int64_t kFlatGrain = int64_t{1} << 15;

// Runs out[k] = f(a[k], b[k]) over a broadcast, in parallel over outer runs.
// Inputs of one shape (the residual adds of every layer) skip the plan and
// its allocations and split the elements themselves over the threads.
template <class TA, class TB, class TO, class F>
void broadcast_loop(const Tensor& A, const Tensor& B, Tensor& Y, ThreadPool& pool, F f) {
  const TA* a = A.data<TA>();
  const TB* b = B.data<TB>();
  TO* y = Y.data<TO>();
  if (A.shape() == B.shape()) {
    pool.parallel_for(Y.size(), kFlatGrain, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) y[k] = f(a[k], b[k]);
    });
    return;
  }
  const BroadcastPlan plan({A.shape(), B.shape()}, Y.shape());
  const int64_t inner = plan.inner();
  const bool sa = plan.inner_step(0), sb = plan.inner_step(1);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(inner, 1));
  pool.parallel_for(plan.outer(), grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const TA* pa = a + plan.offset(0, o);
      const TB* pb = b + plan.offset(1, o);
      TO* py = y + o * inner;
      if (sa && sb)
        for (int64_t k = 0; k < inner; ++k) py[k] = f(pa[k], pb[k]);
      else if (sa)
        for (int64_t k = 0; k < inner; ++k) py[k] = f(pa[k], pb[0]);
      else if (sb)
        for (int64_t k = 0; k < inner; ++k) py[k] = f(pa[0], pb[k]);
      else
        for (int64_t k = 0; k < inner; ++k) py[k] = f(pa[0], pb[0]);
    }
  });
}

enum class Arith2 { Add, Sub, Mul, Div, Mod, FMod, PRelu };

// broadcast_loop for float16 in, float16 out: each run widened 256 at a time
// (vectorised), f applied in float, narrowed once. Bit for bit the
// per-element Arith<Half> loop, as the conversions are exact and f sees
// the same floats.
template <class F>
void broadcast_loop_f16(const Tensor& A, const Tensor& B, Tensor& Y, ThreadPool& pool, F f) {
  const uint16_t* a = A.data<uint16_t>();
  const uint16_t* b = B.data<uint16_t>();
  uint16_t* y = Y.data<uint16_t>();
  const VecMathConfig& vm = vec_math_config();
  // `len` outputs from a and b, each stepping along the run or repeating
  // its first value.
  auto run = [&](const uint16_t* pa, const uint16_t* pb, uint16_t* py, int64_t len, bool sa, bool sb) {
    constexpr int64_t kRun = 256;
    float wa[kRun], wb[kRun];
    const float a0 = half_to_float(pa[0]), b0 = half_to_float(pb[0]);
    for (int64_t k = 0; k < len; k += kRun) {
      const size_t n = static_cast<size_t>(std::min(kRun, len - k));
      if (sa) vm.widen(n, pa + k, wa);
      if (sb) vm.widen(n, pb + k, wb);
      for (size_t i = 0; i < n; ++i) wa[i] = f(sa ? wa[i] : a0, sb ? wb[i] : b0);
      vm.narrow(n, wa, py + k);
    }
  };
  if (A.shape() == B.shape()) {  // one shape: flat, as broadcast_loop
    pool.parallel_for(Y.size(), kFlatGrain, [&](int64_t begin, int64_t end) {
      run(a + begin, b + begin, y + begin, end - begin, true, true);
    });
    return;
  }
  const BroadcastPlan plan({A.shape(), B.shape()}, Y.shape());
  const int64_t inner = plan.inner();
  const bool sa = plan.inner_step(0), sb = plan.inner_step(1);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(inner, 1));
  pool.parallel_for(plan.outer(), grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      run(a + plan.offset(0, o), b + plan.offset(1, o), y + o * inner, inner, sa, sb);
  });
}

// Integer Add, Sub and Mul wrap as numpy's fixed-width integers do
// (ops/int_arith.h). Division by zero, and INT_MIN / -1 (whose quotient does
// not fit), are errors: ONNX leaves them undefined and a CPU traps on them.

template <class C>
void check_divisor(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    if (y == 0) fail("integer division by zero");
    if constexpr (std::is_signed_v<C>)
      if (y == C(-1) && x == std::numeric_limits<C>::min())
        fail("integer division of {} by -1 does not fit the type", static_cast<int64_t>(x));
  }
}

template <class C>
C arith(Arith2 op, C x, C y) {
  switch (op) {
    case Arith2::Add: return wrap_add(x, y);
    case Arith2::Sub: return wrap_sub(x, y);
    case Arith2::Mul: return wrap_mul(x, y);
    case Arith2::Div:
      if constexpr (std::is_integral_v<C>) {
        check_divisor(x, y);
        return static_cast<C>(x / y);
      } else {
        return x / y;
      }
    case Arith2::FMod:
      if constexpr (std::is_integral_v<C>) {
        check_divisor(x, y);
        return static_cast<C>(x % y);
      } else {
        return static_cast<C>(std::fmod(x, y));
      }
    case Arith2::Mod:  // result takes the sign of the divisor (Python/NumPy %)
      if constexpr (std::is_integral_v<C>) {
        check_divisor(x, y);
        C r = static_cast<C>(x % y);
        if constexpr (std::is_signed_v<C>)
          if (r != 0 && ((r < 0) != (y < 0))) r = wrap_add(r, y);
        return r;
      } else {
        C r = static_cast<C>(std::fmod(x, y));
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return r;
      }
    case Arith2::PRelu: return x < C(0) ? wrap_mul(x, y) : x;
  }
  return x;
}

class ArithKernel : public Kernel {
 public:
  ArithKernel(const KernelInfo& info, Arith2 op) : op_(op), name_(info.op_type()) {
    if (op_ == Arith2::Mod && info.attrs().get_int("fmod", 0) == 1) op_ = Arith2::FMod;
  }
  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(0) != ctx.dtype(1))
      fail("inputs are {} and {}; {} needs one type", dtype_name(ctx.dtype(0)), dtype_name(ctx.dtype(1)), name_);
    ctx.set_output(0, ctx.dtype(0), broadcast_shapes({ctx.shape(0), ctx.shape(1)}));
  }
  void run(RunContext& ctx) override {
    if (ctx.input(0).dtype() == DType::F16) {
      const Arith2 op = op_;
      if (op == Arith2::Add)
        return broadcast_loop_f16(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [](float x, float y) { return x + y; });
      if (op == Arith2::Mul)
        return broadcast_loop_f16(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [](float x, float y) { return x * y; });
      return broadcast_loop_f16(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(),
                                [op](float x, float y) { return arith(op, x, y); });
    }
    dispatch_numeric(ctx.input(0).dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const Arith2 op = op_;
      switch (op) {  // hoist the hot ops so their loops vectorise
        case Arith2::Add:
          return broadcast_loop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [](T x, T y) {
            return A::store(static_cast<typename A::C>(wrap_add(A::load(x), A::load(y))));
          });
        case Arith2::Mul:
          return broadcast_loop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [](T x, T y) {
            return A::store(static_cast<typename A::C>(wrap_mul(A::load(x), A::load(y))));
          });
        default:
          return broadcast_loop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [op](T x, T y) {
            return A::store(arith(op, A::load(x), A::load(y)));
          });
      }
    });
  }

 private:
  Arith2 op_;
  std::string name_;
};

// Pow: the exponent may have its own type (opset 15+).
class PowKernel : public Kernel {
 public:
  explicit PowKernel(const KernelInfo&) {}
  void reshape(ReshapeContext& ctx) override {
    ctx.set_output(0, ctx.dtype(0), broadcast_shapes({ctx.shape(0), ctx.shape(1)}));
  }
  void run(RunContext& ctx) override {
    // A float16 square (a float16 export's RMSNorm: Pow(x, 2)): x·x on the
    // widened runs of broadcast_loop_f16 (exact in float: 22 significant
    // bits at most), narrowed once; the loop below gives the same bits
    // through pow in double, one element at a time. One exponent of 2
    // broadcasts to x's elements in x's order (Y's, flat).
    const Tensor& e = ctx.input(1);
    const DType et = e.dtype();
    const bool numeric = et == DType::F16 || et == DType::F32 || et == DType::F64 || et == DType::BF16 ||
                         et == DType::I32 || et == DType::I64;
    if (ctx.input(0).dtype() == DType::F16 && e.size() == 1 && numeric && tensor_double_at(e, 0) == 2.0)
      return broadcast_loop_f16(ctx.input(0), ctx.input(0), ctx.output(0), ctx.pool(),
                                [](float a, float b) { return a * b; });
    dispatch_numeric(ctx.input(0).dtype(), "Pow", [&](auto ta) {
      using T = typename decltype(ta)::type;
      dispatch_numeric(ctx.input(1).dtype(), "Pow exponent", [&](auto tb) {
        using E = typename decltype(tb)::type;
        broadcast_loop<T, E, T>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [](T x, E e) {
          const double xe = static_cast<double>(Arith<T>::load(x));
          const double ee = static_cast<double>(Arith<E>::load(e));
          if constexpr (std::is_integral_v<T> && std::is_integral_v<E>) {
            return wrap_pow(x, e);  // exact, and wraps as Mul does
          } else if constexpr (std::is_integral_v<T>) {
            return float_to_int<T>(std::pow(xe, ee));  // NaN and out of range as Cast gives them
          } else if constexpr (std::is_same_v<T, float>) {
            // x*x for the common square keeps float exactness (RMSNorm's Pow(x, 2)).
            if (ee == 2.0) return static_cast<float>(x * x);
            return std::pow(x, static_cast<float>(ee));
          } else {
            return Arith<T>::store(static_cast<typename Arith<T>::C>(std::pow(xe, ee)));
          }
        });
      });
    });
  }
};

enum class Cmp { Equal, Less, Greater, LessOrEqual, GreaterOrEqual };

class CompareKernel : public Kernel {
 public:
  CompareKernel(const KernelInfo& info, Cmp op) : op_(op), name_(info.op_type()) {}
  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(0) != ctx.dtype(1))
      fail("inputs are {} and {}; {} needs one type", dtype_name(ctx.dtype(0)), dtype_name(ctx.dtype(1)), name_);
    ctx.set_output(0, DType::Bool, broadcast_shapes({ctx.shape(0), ctx.shape(1)}));
  }
  void run(RunContext& ctx) override {
    dispatch_any(ctx.input(0).dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const Cmp op = op_;
      broadcast_loop<T, T, bool>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [op](T x, T y) {
        const auto a = A::load(x), b = A::load(y);
        switch (op) {
          case Cmp::Equal: return a == b;
          case Cmp::Less: return a < b;
          case Cmp::Greater: return a > b;
          case Cmp::LessOrEqual: return a <= b;
          case Cmp::GreaterOrEqual: return a >= b;
        }
        return false;
      });
    });
  }

 private:
  Cmp op_;
  std::string name_;
};

enum class Logic { And, Or, Xor, BitAnd, BitOr, BitXor, ShiftLeft, ShiftRight };

class LogicKernel : public Kernel {
 public:
  LogicKernel(const KernelInfo& info, Logic op) : op_(op), name_(info.op_type()) {
    if (op_ == Logic::ShiftLeft) {
      const std::string dir = info.attrs().get_string("direction", "");
      if (dir == "RIGHT") op_ = Logic::ShiftRight;
      else if (dir != "LEFT") fail("attribute 'direction' is '{}', expected LEFT or RIGHT", dir);
    }
  }
  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(0) != ctx.dtype(1))
      fail("inputs are {} and {}; {} needs one type", dtype_name(ctx.dtype(0)), dtype_name(ctx.dtype(1)), name_);
    const bool logical = op_ == Logic::And || op_ == Logic::Or || op_ == Logic::Xor;
    if (logical && ctx.dtype(0) != DType::Bool) fail("{} needs bool inputs, got {}", name_, dtype_name(ctx.dtype(0)));
    ctx.set_output(0, ctx.dtype(0), broadcast_shapes({ctx.shape(0), ctx.shape(1)}));
  }
  void run(RunContext& ctx) override {
    const Logic op = op_;
    if (ctx.input(0).dtype() == DType::Bool) {
      broadcast_loop<bool, bool, bool>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [op](bool x, bool y) {
        switch (op) {
          case Logic::And:
          case Logic::BitAnd: return x && y;
          case Logic::Or:
          case Logic::BitOr: return x || y;
          default: return x != y;
        }
      });
      return;
    }
    dispatch_integer(ctx.input(0).dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      broadcast_loop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), ctx.pool(), [op](T x, T y) {
        switch (op) {
          case Logic::BitAnd: return static_cast<T>(x & y);
          case Logic::BitOr: return static_cast<T>(x | y);
          case Logic::BitXor: return static_cast<T>(x ^ y);
          case Logic::ShiftLeft: return y >= T(sizeof(T) * 8) ? T(0) : static_cast<T>(x << y);
          case Logic::ShiftRight: return y >= T(sizeof(T) * 8) ? T(0) : static_cast<T>(x >> y);
          default: return T(0);
        }
      });
    });
  }

 private:
  Logic op_;
  std::string name_;
};

}  // namespace

void register_binary_ops(OpRegistry& r) {
  // Since-versions from the operator schemas. The versions after 13 only
  // add types (Add..Div-14 8/16-bit integers, PRelu-16, Pow-15,
  // LessOrEqual/GreaterOrEqual-16 bfloat16): one kernel for all.
  auto arith_op = [&](const char* name, std::initializer_list<int64_t> sinces, Arith2 op) {
    r.add_versions("", name, sinces, [op](const KernelInfo& i) { return std::make_unique<ArithKernel>(i, op); });
  };
  arith_op("Add", {13, 14}, Arith2::Add);
  arith_op("Sub", {13, 14}, Arith2::Sub);
  arith_op("Mul", {13, 14}, Arith2::Mul);
  arith_op("Div", {13, 14}, Arith2::Div);
  arith_op("Mod", {13}, Arith2::Mod);
  arith_op("PRelu", {9, 16}, Arith2::PRelu);
  r.add_versions("", "Pow", {13, 15}, make_factory<PowKernel>());
  auto cmp_op = [&](const char* name, std::initializer_list<int64_t> sinces, Cmp op) {
    r.add_versions("", name, sinces, [op](const KernelInfo& i) { return std::make_unique<CompareKernel>(i, op); });
  };
  // Equal-19 adds string inputs (not held): the same kernel.
  r.add_versions("", "Equal", {13, 19}, [](const KernelInfo& i) { return std::make_unique<CompareKernel>(i, Cmp::Equal); });
  cmp_op("Less", {13}, Cmp::Less);
  cmp_op("Greater", {13}, Cmp::Greater);
  cmp_op("LessOrEqual", {12, 16}, Cmp::LessOrEqual);
  cmp_op("GreaterOrEqual", {12, 16}, Cmp::GreaterOrEqual);
  auto logic_op = [&](const char* name, int64_t since, Logic op) {
    r.add("", name, since, kOnnxOpsetMax, [op](const KernelInfo& i) { return std::make_unique<LogicKernel>(i, op); });
  };
  logic_op("And", 7, Logic::And);
  logic_op("Or", 7, Logic::Or);
  logic_op("Xor", 7, Logic::Xor);
  logic_op("BitwiseAnd", 18, Logic::BitAnd);
  logic_op("BitwiseOr", 18, Logic::BitOr);
  logic_op("BitwiseXor", 18, Logic::BitXor);
  logic_op("BitShift", 11, Logic::ShiftLeft);
}

}  // namespace onebit
