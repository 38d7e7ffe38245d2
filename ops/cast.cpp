// Cast and CastLike among float32/float64/float16/bfloat16, the 8- to 64-bit
// integers, bool and (opset 21) the packed int4/uint4.
//
// Conversion rules, after the Cast schema:
//   float -> float   round to nearest even; +/-inf when out of range. f64 to
//                    f16/bf16 rounds once (via round-to-odd float32), not twice.
//   float -> int     truncation toward zero where the value fits. Out of range
//                    and NaN are undefined in the spec; we give what x86's
//                    cvtt instructions give, as NumPy (the backend tests'
//                    reference) and ONNX Runtime do on x86: targets up to 32
//                    bits go through int32 (out of range -> INT32_MIN), uint32
//                    and int64 through int64 (-> INT64_MIN), then keep the low
//                    bits. So float -> int4 keeps the low nibble of the
//                    truncated value (9.0 -> -7), as the backend tests expect.
//   int -> int       keep the low bits (two's complement): 200 (int16) -> -56 (int8).
//   * -> bool        zero (and -0.0) to false, everything else (NaN too) to true.
//   bool -> *        1 or 0.
// float8 types are not held by 1bit: a Cast to or from one is a clear error,
// and so the `saturate` attribute (float8 only) changes nothing here.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/dispatch.h"
#include "ops/int_arith.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// ONNX TensorProto.DataType names for the types 1bit does not hold, so the
// error says what the file asked for.
const char* onnx_type_name(int64_t t) {
  switch (t) {
    case 8: return "string";
    case 14: return "complex64";
    case 15: return "complex128";
    case 17: return "float8e4m3fn";
    case 18: return "float8e4m3fnuz";
    case 19: return "float8e5m2";
    case 20: return "float8e5m2fnuz";
    case 23: return "float4e2m1";
    case 24: return "float8e8m0";
    case 25: return "uint2";
    case 26: return "int2";
    default: return "unknown";
  }
}

// The nearest float32 to d in the direction of zero, with its lowest bit
// forced to 1 when inexact ("round to odd"). Rounding that float to a type of
// at most 22 mantissa bits then equals rounding d directly.
float round_to_odd_float(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Storage value -> the value converted from (16-bit floats widen to float).
template <class S>
auto load(S v) {
  if constexpr (std::is_same_v<S, Half>) return half_to_float(v.bits);
  else if constexpr (std::is_same_v<S, BFloat16>) return bfloat16_to_float(v.bits);
  else return v;
}

// One value (float, double, an integer or bool) to storage type D.
template <class D, class V>
D convert(V v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != V(0);
  } else if constexpr (std::is_same_v<D, Half>) {
    // Integers that float32 cannot hold exactly are beyond f16's range anyway.
    if constexpr (std::is_same_v<V, double>) return Half{float_to_half(round_to_odd_float(v))};
    else return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    if constexpr (std::is_same_v<V, float>) return BFloat16{float_to_bfloat16(v)};
    else if constexpr (std::is_same_v<V, double> || (std::is_integral_v<V> && sizeof(V) >= 4))
      return BFloat16{float_to_bfloat16(round_to_odd_float(static_cast<double>(v)))};
    else return BFloat16{float_to_bfloat16(static_cast<float>(v))};
  } else if constexpr (std::is_floating_point_v<D>) {
    return static_cast<D>(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    return float_to_int<D>(static_cast<double>(v));
  } else {
    return static_cast<D>(v);  // modular (C++20)
  }
}

bool is_nibble(DType t) { return t == DType::I4 || t == DType::U4; }

// Every type Cast handles: the byte-addressable ones, bool and 4-bit.
void check_cast_type(DType t, const char* what) {
  if (!dtype_supported(t)) fail("{} is {} ({}), which 1bit does not hold", what, static_cast<int>(t),
                                onnx_type_name(static_cast<int64_t>(t)));
}

void cast_tensor(ThreadPool& pool, const Tensor& x, Tensor& y) {
  const DType from = x.dtype(), to = y.dtype();
  const int64_t n = x.size();
  if (from == to || (is_nibble(from) && is_nibble(to))) {
    // Same bits (int4 <-> uint4 reinterpret the nibble: keep the low bits).
    if (x.bytes() && x.raw() != y.raw()) std::memcpy(y.raw(), x.raw(), x.bytes());
    return;
  }
  if (is_nibble(from)) {
    const bool sgn = from == DType::I4;
    const uint8_t* p = x.data<uint8_t>();
    dispatch_any(to, "Cast output", [&](auto dt) {
      using D = typename decltype(dt)::type;
      D* out = y.data<D>();
      pool.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const int v = nibble_at(p, i, sgn);
          out[i] = sgn ? convert<D>(static_cast<int8_t>(v)) : convert<D>(static_cast<uint8_t>(v));
        }
      });
    });
    return;
  }
  // float16 <-> float32 (a float16 model's norms): the vectorised
  // conversions, bit for bit the scalar ones.
  if ((from == DType::F16 && to == DType::F32) || (from == DType::F32 && to == DType::F16)) {
    const VecMathConfig& vm = vec_math_config();
    pool.parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      const size_t len = static_cast<size_t>(e - b);
      if (from == DType::F16) vm.widen(len, x.data<uint16_t>() + b, y.data<float>() + b);
      else vm.narrow(len, x.data<float>() + b, y.data<uint16_t>() + b);
    });
    return;
  }
  dispatch_any(from, "Cast input", [&](auto st) {
    using S = typename decltype(st)::type;
    const S* in = x.data<S>();
    if (is_nibble(to)) {
      uint8_t* out = y.data<uint8_t>();
      if (to == DType::I4)
        pack_nibbles_parallel(pool, out, n, [&](int64_t i) { return convert<int8_t>(load(in[i])); });
      else
        pack_nibbles_parallel(pool, out, n, [&](int64_t i) { return convert<uint8_t>(load(in[i])); });
      return;
    }
    dispatch_any(to, "Cast output", [&](auto dt) {
      using D = typename decltype(dt)::type;
      map_elements(pool, in, y.data<D>(), n, [](S v) { return convert<D>(load(v)); });
    });
  });
}

class CastKernel : public Kernel {
 public:
  // like = true for CastLike, whose target is input 1's type.
  CastKernel(const KernelInfo& info, bool like) : like_(like) {
    // `saturate` only concerns float8 targets, which are refused below.
    const int64_t saturate = info.attrs().get_int("saturate", 1);
    if (saturate != 0 && saturate != 1) fail("attribute 'saturate' is {}, expected 0 or 1", saturate);
    if (!like_) {
      const int64_t to = info.attrs().get_int("to");
      if (to <= 0 || to > 64 || !dtype_supported(static_cast<int32_t>(to)))
        fail("attribute 'to' is {} ({}), which 1bit does not hold", to, onnx_type_name(to));
      to_ = static_cast<DType>(to);
    }
  }

  void reshape(ReshapeContext& ctx) override {
    check_cast_type(ctx.dtype(0), "input 0's type");
    const DType to = like_ ? ctx.dtype(1) : to_;
    if (like_) check_cast_type(to, "input 1's type");
    // The output has the input's bytes when the type does not change.
    if (to == ctx.dtype(0)) ctx.alias_output(0, 0, ctx.shape(0));
    else ctx.set_output(0, to, ctx.shape(0));
  }

  void run(RunContext& ctx) override { cast_tensor(ctx.pool(), ctx.input(0), ctx.output(0)); }

  bool needs_input_data(int input) const override { return input == 0; }

 private:
  bool like_;
  DType to_ = DType::Undefined;
};

}  // namespace

void register_cast_ops(OpRegistry& r) {
  auto cast = [](const KernelInfo& i) { return std::make_unique<CastKernel>(i, false); };
  auto cast_like = [](const KernelInfo& i) { return std::make_unique<CastKernel>(i, true); };
  // 19 added float8 and `saturate`, 21 int4/uint4, 23 float4e2m1, 24
  // float8e8m0 and `round_mode` (which only rounds into float8e8m0), 25
  // int2/uint2: types 1bit does not hold, so one kernel covers every version.
  r.add_versions("", "Cast", {13, 19, 21, 23, 24, 25}, cast);
  r.add_versions("", "CastLike", {15, 19, 21, 23, 24, 25}, cast_like);
}

}  // namespace onebit
