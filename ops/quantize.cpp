// QuantizeLinear and DequantizeLinear (ai.onnx 13 / 19 / 21 and
// com.microsoft 1) and DynamicQuantizeLinear (ai.onnx 11).
//
//   QuantizeLinear:   y = saturate(round_half_to_even(x / scale) + zero_point)
//   DequantizeLinear: y = (x - zero_point) * scale
//
// These are the numeric contract of DESIGN.md ("Numeric contracts"): x / scale
// is a float32 division exactly as written (never a multiplication by 1/scale,
// which rounds differently), rounded to nearest even, then the zero point is
// added, then the sum saturates to the output type. f16/bf16 inputs and
// scales are widened to float32 first (exactly). DequantizeLinear forms
// x - zero_point exactly as an integer and multiplies once in float32; an
// f16/bf16 scale gives an f16/bf16 output, rounded from that float32 product,
// as the reference implementation does.
//
// Granularity comes from the scale's shape:
//   per tensor  a scalar (or one element);
//   per axis    1-D of length x.shape[axis];
//   blocked     (opset 21, block_size = B > 0) x's shape with dim `axis`
//               replaced by ceil(D / B); the last block may be partial.
// The zero point, when given, has the scale's shape and the quantized type;
// without it the zero point is 0 of output_dtype (or uint8).
//
// Types: int8, uint8, int16, uint16, int4, uint4 (the last four at opset 21),
// and int32 input to DequantizeLinear (no zero point, or an int32 one).
// float8 types (opset 19+) are not held by 1bit and fail at load; the
// `saturate` attribute only concerns them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/sizes.h"
#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

bool is_nibble(DType t) { return t == DType::I4 || t == DType::U4; }

// The quantized types (not int32, which only DequantizeLinear reads).
bool is_quant_type(DType t) {
  return t == DType::I8 || t == DType::U8 || t == DType::I16 || t == DType::U16 || is_nibble(t);
}

void quant_range(DType t, float& lo, float& hi) {
  switch (t) {
    case DType::I8: lo = -128, hi = 127; return;
    case DType::U8: lo = 0, hi = 255; return;
    case DType::I16: lo = -32768, hi = 32767; return;
    case DType::U16: lo = 0, hi = 65535; return;
    case DType::I4: lo = -8, hi = 7; return;
    case DType::U4: lo = 0, hi = 15; return;
    default: unsupported_dtype("quantized type", t);
  }
}

// How scale / zero point map onto x, viewed as [outer, D, inner] around axis.
struct QuantLayout {
  enum class Mode { Tensor, Axis, Block } mode = Mode::Tensor;
  int64_t outer = 1, d = 1, inner = 1;  // x as [outer, d, inner]
  int64_t block = 0, s_d = 1;           // Block: block size, scale's dim at axis
};

// Checks the scale (input 1) and zero point (input 2) shapes against x and
// returns the layout. Errors name the input, its shape and the expectation.
QuantLayout plan_layout(const Shape& x, const Shape& scale, const Shape* zp, int64_t axis_attr, int64_t block) {
  QuantLayout l;
  const int64_t rank = static_cast<int64_t>(x.size());
  // A scalar and a one-element 1-D tensor both mean per tensor; the backend
  // tests pair them (test_dequantizelinear_int4: scale [], zero point [1]).
  const bool one_each = zp && numel(*zp) == 1 && numel(scale) == 1 && zp->size() <= 1 && scale.size() <= 1;
  if (zp && *zp != scale && !one_each)
    fail("input 2 (zero point) has shape {}, expected the scale's shape {}", shape_str(*zp), shape_str(scale));
  if (numel(scale) == 1 && block == 0 && scale.size() <= 1) {  // per tensor: one row of every element
    l.inner = numel(x);
    return l;
  }
  const int axis = static_cast<int>(normalize_axis(axis_attr, rank, "attribute 'axis'"));
  l.outer = dims_product(x, 0, axis);
  l.d = x[static_cast<size_t>(axis)];
  l.inner = dims_product(x, axis + 1, static_cast<int>(rank));
  if (block == 0) {
    if (scale.size() != 1 || scale[0] != l.d)
      fail("input 1 (scale) has shape {}; per-axis quantization along axis {} of x {} needs [{}] (or a scalar)",
           shape_str(scale), axis, shape_str(x), l.d);
    l.mode = QuantLayout::Mode::Axis;
    return l;
  }
  Shape want = x;
  want[static_cast<size_t>(axis)] = ceil_div(l.d, block);
  if (scale != want)
    fail("input 1 (scale) has shape {}; blocked quantization of x {} with block_size {} along axis {} needs {}",
         shape_str(scale), shape_str(x), block, axis, shape_str(want));
  l.mode = QuantLayout::Mode::Block;
  l.block = block;
  l.s_d = want[static_cast<size_t>(axis)];
  return l;
}

// plan_layout for a node's inputs (x, scale, optional zero point).
QuantLayout layout_of(const ReshapeContext& ctx, int64_t axis, int64_t block) {
  return plan_layout(ctx.shape(0), ctx.shape(1), ctx.has_input(2) ? &ctx.shape(2) : nullptr, axis, block);
}
QuantLayout layout_of(const RunContext& ctx, int64_t axis, int64_t block) {
  const Tensor* z = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  return plan_layout(ctx.input(0).shape(), ctx.input(1).shape(), z ? &z->shape() : nullptr, axis, block);
}

// Calls run(j0, len, p0, ps) for the rows [row_begin, row_end) (a row is one
// (outer, d) pair of `inner` elements): elements j0 .. j0 + len - 1 use the
// scale / zero point at p0 + i * ps (ps = 0: one pair for the whole run, so
// the loop over it can hold them in registers and vectorise).
template <class Run>
void for_each_run(const QuantLayout& l, int64_t row_begin, int64_t row_end, Run run) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t o = row / l.d, d = row % l.d, j0 = row * l.inner;
    if (l.mode == QuantLayout::Mode::Block) run(j0, l.inner, (o * l.s_d + d / l.block) * l.inner, int64_t{1});
    else run(j0, l.inner, l.mode == QuantLayout::Mode::Axis ? d : int64_t{0}, int64_t{0});
  }
}

// for_each_run over every element, in parallel when large. Tasks start on
// even elements so 4-bit outputs never share a byte across threads: per
// tensor by construction, per row when `inner` is even; otherwise (4-bit
// output, odd `inner`) the loop stays serial.
template <class Run>
void for_all_runs(ThreadPool& pool, const QuantLayout& l, bool nibble_output, Run run) {
  if (l.mode == QuantLayout::Mode::Tensor) {  // one long row: split it on even elements
    const int64_t n = l.inner;
    pool.parallel_for((n + 1) / 2, kElementwiseGrain / 2, [&](int64_t b, int64_t e) {
      run(2 * b, std::min(2 * e, n) - 2 * b, int64_t{0}, int64_t{0});
    });
    return;
  }
  const int64_t rows = l.outer * l.d;
  if (nibble_output && l.inner % 2 != 0) return for_each_run(l, 0, rows, run);
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(l.inner, 1));
  pool.parallel_for(rows, grain, [&](int64_t b, int64_t e) { for_each_run(l, b, e, run); });
}

// Element i of quantized data as an integer (4-bit types unpacked).
template <class Q>
int32_t quant_at(const void* p, int64_t i, bool sgn) {
  if constexpr (std::is_same_v<Q, void>) {
    return nibble_at(static_cast<const uint8_t*>(p), i, sgn);
  } else {
    (void)sgn;
    return static_cast<const Q*>(p)[i];
  }
}

// Dispatches on a quantized storage type; 4-bit types map to `void` (read and
// written by nibble).
template <class F>
void dispatch_quant(DType t, F&& f) {
  switch (t) {
    case DType::I8: return f(Tag<int8_t>{});
    case DType::U8: return f(Tag<uint8_t>{});
    case DType::I16: return f(Tag<int16_t>{});
    case DType::U16: return f(Tag<uint16_t>{});
    case DType::I32: return f(Tag<int32_t>{});
    case DType::I4:
    case DType::U4: return f(Tag<void>{});
    default: unsupported_dtype("quantized data", t);
  }
}

void check_float8(int64_t t, const char* what) {
  if (t >= 17 && t <= 20) fail("{} is float8 (ONNX type {}); 1bit does not hold float8 tensors", what, t);
}

class QuantizeKernel : public Kernel {
 public:
  QuantizeKernel(const KernelInfo& info, bool opset21_attrs) {
    const Attributes& a = info.attrs();
    axis_ = a.get_int("axis", 1);
    block_ = a.get_int("block_size", 0);
    output_dtype_ = a.get_int("output_dtype", 0);
    const int64_t saturate = a.get_int("saturate", 1);
    if (saturate != 0 && saturate != 1) fail("attribute 'saturate' is {}, expected 0 or 1", saturate);
    if (!opset21_attrs && (a.has("block_size") || a.has("output_dtype")))
      fail("attributes 'block_size' and 'output_dtype' need ai.onnx opset 21; this node is opset {}", info.opset());
    if (block_ < 0) fail("attribute 'block_size' is {}, expected 0 (none) or a positive block size", block_);
    // precision (opset 23): the type x / y_scale is computed in; 0 means the
    // scale's type. 1bit divides in float32 for every scale type.
    const bool v23 = info.node().domain.empty() && info.opset() >= 23;
    const int64_t precision = a.get_int("precision", 0);
    if (a.has("precision") && !v23)
      fail("attribute 'precision' needs ai.onnx opset 23; this node is opset {}", info.opset());
    if (precision != 0 && precision != static_cast<int64_t>(DType::F32))
      fail("attribute 'precision' is {}, expected 0 (the scale's type) or 1 (float32): 1bit divides in float32",
           precision);
    check_float8(output_dtype_, "attribute 'output_dtype'");
    if (output_dtype_ != 0 && !(dtype_supported(static_cast<int32_t>(output_dtype_)) &&
                                is_quant_type(static_cast<DType>(output_dtype_))))
      fail("attribute 'output_dtype' is {}, expected int8 (3), uint8 (2), int16 (5), uint16 (4), int4 (22) or "
           "uint4 (21)",
           output_dtype_);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType xt = ctx.dtype(0), st = ctx.dtype(1);
    if (!(xt == DType::F32 || xt == DType::F16 || xt == DType::BF16 || xt == DType::I32))
      unsupported_dtype("QuantizeLinear input 0 (x)", xt);
    if (!(st == DType::F32 || st == DType::F16 || st == DType::BF16))
      unsupported_dtype("QuantizeLinear input 1 (y_scale)", st);
    DType out = output_dtype_ ? static_cast<DType>(output_dtype_) : DType::U8;
    if (ctx.has_input(2)) {
      const DType zt = ctx.dtype(2);
      if (!is_quant_type(zt)) unsupported_dtype("QuantizeLinear input 2 (y_zero_point)", zt);
      if (output_dtype_ && zt != out)
        fail("attribute 'output_dtype' is {} but input 2 (y_zero_point) is {}; they must agree",
             dtype_name(out), dtype_name(zt));
      out = zt;
    }
    layout_of(ctx, axis_, block_);
    ctx.set_output(0, out, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const Tensor& S = ctx.input(1);
    const Tensor* Z = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& Y = ctx.output(0);
    const QuantLayout l = layout_of(ctx, axis_, block_);
    if (X.size() == 0) return;
    const DType out = Y.dtype();
    float lo, hi;
    quant_range(out, lo, hi);
    const bool sgn = out == DType::I4;
    if (is_nibble(out)) Y.data<uint8_t>()[(X.size() - 1) / 2] = 0;  // the unused high nibble of an odd count
    dispatch_float(S.dtype(), "QuantizeLinear y_scale", [&](auto stag) {
      using ST = typename decltype(stag)::type;
      const ST* scale = S.data<ST>();
      dispatch_quant(out, [&](auto qtag) {
        using Q = typename decltype(qtag)::type;
        const void* zp = Z ? Z->raw() : nullptr;
        void* y = Y.raw();
        // saturate(q_real) into y[j]; q_real is the rounded quotient plus the zero point.
        auto emit = [&](int64_t j, float v) {
          v = !(v >= lo) ? lo : v;  // NaN saturates low, as ONNX Runtime and the reference do
          v = v > hi ? hi : v;
          const int32_t q = static_cast<int32_t>(v);
          if constexpr (std::is_same_v<Q, void>) {
            uint8_t& b = static_cast<uint8_t*>(y)[j >> 1];
            const unsigned nib = static_cast<unsigned>(q) & 0x0Fu;
            b = static_cast<uint8_t>((j & 1) ? ((b & 0x0F) | (nib << 4)) : ((b & 0xF0) | nib));
          } else {
            static_cast<Q*>(y)[j] = static_cast<Q>(q);
          }
        };
        auto zero_at = [&](int64_t p) -> float { return zp ? static_cast<float>(quant_at<Q>(zp, p, sgn)) : 0.0f; };
        auto scale_at = [&](int64_t p) { return static_cast<float>(Arith<ST>::load(scale[p])); };
        if (X.dtype() == DType::I32) {
          // int32 x (opset 13): the division runs in double, as x / scale
          // promotes there in the reference implementation.
          const int32_t* x = X.data<int32_t>();
          for_all_runs(ctx.pool(), l, is_nibble(out), [&](int64_t j0, int64_t len, int64_t p0, int64_t ps) {
            for (int64_t i = 0; i < len; ++i) {
              const int64_t p = p0 + i * ps;
              const double qd = round_half_even(static_cast<double>(x[j0 + i]) / static_cast<double>(scale_at(p)));
              emit(j0 + i, static_cast<float>(qd + zero_at(p)));
            }
          });
          return;
        }
        dispatch_float(X.dtype(), "QuantizeLinear x", [&](auto xtag) {
          using XT = typename decltype(xtag)::type;
          const XT* x = X.data<XT>();
          // round(x / scale) + zp: exact in float whenever the sum is within
          // any quantized range (|rounded| < 2^24); beyond, it saturates anyway.
          auto quant = [](float xv, float s, float z) { return round_half_even(xv / s) + z; };
          for_all_runs(ctx.pool(), l, is_nibble(out), [&](int64_t j0, int64_t len, int64_t p0, int64_t ps) {
            if (ps == 0) {
              const float s = scale_at(p0), z = zero_at(p0);
              for (int64_t i = 0; i < len; ++i) emit(j0 + i, quant(Arith<XT>::load(x[j0 + i]), s, z));
            } else {
              for (int64_t i = 0; i < len; ++i)
                emit(j0 + i, quant(Arith<XT>::load(x[j0 + i]), scale_at(p0 + i), zero_at(p0 + i)));
            }
          });
        });
      });
    });
  }

 private:
  int64_t axis_ = 1, block_ = 0, output_dtype_ = 0;
};

class DequantizeKernel : public Kernel {
 public:
  DequantizeKernel(const KernelInfo& info, bool opset21_attrs) {
    axis_ = info.attrs().get_int("axis", 1);
    block_ = info.attrs().get_int("block_size", 0);
    if (!opset21_attrs && info.attrs().has("block_size"))
      fail("attribute 'block_size' needs ai.onnx opset 21; this node is opset {}", info.opset());
    if (block_ < 0) fail("attribute 'block_size' is {}, expected 0 (none) or a positive block size", block_);
    // output_dtype (opset 23): the output's float type; 0 means the scale's.
    output_dtype_ = info.attrs().get_int("output_dtype", 0);
    if (info.attrs().has("output_dtype") && !(info.node().domain.empty() && info.opset() >= 23))
      fail("attribute 'output_dtype' needs ai.onnx opset 23; this node is opset {}", info.opset());
    const DType od = static_cast<DType>(output_dtype_);
    if (output_dtype_ != 0 && od != DType::F32 && od != DType::F16 && od != DType::BF16)
      fail("attribute 'output_dtype' is {}, expected 0 (the scale's type), float (1), float16 (10) or bfloat16 (16)",
           output_dtype_);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType xt = ctx.dtype(0), st = ctx.dtype(1);
    if (!(is_quant_type(xt) || xt == DType::I32)) unsupported_dtype("DequantizeLinear input 0 (x)", xt);
    if (!(st == DType::F32 || st == DType::F16 || st == DType::BF16))
      unsupported_dtype("DequantizeLinear input 1 (x_scale)", st);
    if (ctx.has_input(2) && ctx.dtype(2) != xt)
      fail("input 2 (x_zero_point) is {}, x is {}; they must agree", dtype_name(ctx.dtype(2)), dtype_name(xt));
    layout_of(ctx, axis_, block_);
    ctx.set_output(0, output_dtype_ ? static_cast<DType>(output_dtype_) : st, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const Tensor& S = ctx.input(1);
    const Tensor* Z = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& Y = ctx.output(0);
    const QuantLayout l = layout_of(ctx, axis_, block_);
    if (X.size() == 0) return;
    const bool sgn = X.dtype() == DType::I4;
    dispatch_float(S.dtype(), "DequantizeLinear x_scale", [&](auto stag) {
     dispatch_float(Y.dtype(), "DequantizeLinear output", [&](auto otag) {
      using ST = typename decltype(stag)::type;
      using OT = typename decltype(otag)::type;
      // The scale loads as ST, the result stores as the output type.
      struct A {
        static typename Arith<ST>::C load(ST v) { return Arith<ST>::load(v); }
        static OT store(float v) { return Arith<OT>::store(static_cast<typename Arith<OT>::C>(v)); }
      };
      const ST* scale = S.data<ST>();
      OT* y = Y.data<OT>();
      dispatch_quant(X.dtype(), [&](auto qtag) {
        using Q = typename decltype(qtag)::type;
        const void* x = X.raw();
        const void* zp = Z ? Z->raw() : nullptr;
        auto at = [&](const void* p, int64_t i) { return static_cast<int64_t>(quant_at<Q>(p, i, sgn)); };
        for_all_runs(ctx.pool(), l, false, [&](int64_t j0, int64_t len, int64_t p0, int64_t ps) {
          if constexpr (std::is_same_v<Q, int32_t>) {
            // x - zp can need 33 bits; one rounding from the exact product.
            for (int64_t i = 0; i < len; ++i) {
              const int64_t p = p0 + i * ps;
              const double s = static_cast<double>(A::load(scale[p]));
              y[j0 + i] = A::store(static_cast<float>(static_cast<double>(at(x, j0 + i) - (zp ? at(zp, p) : 0)) * s));
            }
          } else if (ps == 0) {
            // (x - zp) is exact in int32 and in float; one rounding, the product.
            const float s = static_cast<float>(A::load(scale[p0]));
            const int32_t z = zp ? static_cast<int32_t>(at(zp, p0)) : 0;
            for (int64_t i = 0; i < len; ++i)
              y[j0 + i] = A::store(static_cast<float>(static_cast<int32_t>(at(x, j0 + i)) - z) * s);
          } else {
            for (int64_t i = 0; i < len; ++i) {
              const float s = static_cast<float>(A::load(scale[p0 + i]));
              const int32_t z = zp ? static_cast<int32_t>(at(zp, p0 + i)) : 0;
              y[j0 + i] = A::store(static_cast<float>(static_cast<int32_t>(at(x, j0 + i)) - z) * s);
            }
          }
        });
      });
     });
    });
  }

 private:
  int64_t axis_ = 1, block_ = 0, output_dtype_ = 0;
};

// DynamicQuantizeLinear (opset 11), uint8 only. Following the reference
// implementation: the range is widened to include 0; a zero range gives
// scale 1/255 (not a division by zero); the zero point saturates before it
// is rounded.
class DynamicQuantizeKernel : public Kernel {
 public:
  explicit DynamicQuantizeKernel(const KernelInfo&) {}

  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(0) != DType::F32) unsupported_dtype("DynamicQuantizeLinear input 0 (x)", ctx.dtype(0));
    ctx.set_output(0, DType::U8, ctx.shape(0));
    ctx.set_output(1, DType::F32, {});
    ctx.set_output(2, DType::U8, {});
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const float* x = X.data<float>();
    const int64_t n = X.size();
    float mx = 0, mn = 0;
    for (int64_t i = 0; i < n; ++i) {
      mx = std::max(mx, x[i]);
      mn = std::min(mn, x[i]);
    }
    const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    const float zp = round_half_even(std::min(255.0f, std::max(0.0f, 0.0f - mn / scale)));
    map_elements(ctx.pool(), x, ctx.output(0).data<uint8_t>(), n, [=](float v) {
      float q = round_half_even(v / scale) + zp;
      q = !(q >= 0.0f) ? 0.0f : q;
      q = q > 255.0f ? 255.0f : q;
      return static_cast<uint8_t>(q);
    });
    if (ctx.has_output(1)) ctx.output(1).data<float>()[0] = scale;
    if (ctx.has_output(2)) ctx.output(2).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  }
};

}  // namespace

void register_quantize_ops(OpRegistry& r) {
  auto q = [](bool v21) {
    return [v21](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<QuantizeKernel>(i, v21); };
  };
  auto dq = [](bool v21) {
    return [v21](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<DequantizeKernel>(i, v21); };
  };
  // 13: per tensor / per axis, int8/uint8. 19: float8 and f16/bf16 scales.
  // 21: blocked, int4/uint4/int16/uint16, output_dtype (Q). 23: float4e2m1,
  // DequantizeLinear's output_dtype, QuantizeLinear's precision (the kernels
  // read the node's opset). 24, 25: float8e8m0 and 2-bit types, not held.
  r.add("", "QuantizeLinear", 13, 18, q(false));
  r.add("", "QuantizeLinear", 19, 20, q(false));
  r.add_versions("", "QuantizeLinear", {21, 23, 24, 25}, q(true));
  r.add("", "DequantizeLinear", 13, 18, dq(false));
  r.add("", "DequantizeLinear", 19, 20, dq(false));
  r.add_versions("", "DequantizeLinear", {21, 23, 24, 25}, dq(true));
  // ONNX Runtime's contrib ops: the same operators (axis, 16-bit and 4-bit types).
  r.add(kMicrosoftDomain, "QuantizeLinear", 1, 1, q(true));
  r.add(kMicrosoftDomain, "DequantizeLinear", 1, 1, dq(true));
  r.add("", "DynamicQuantizeLinear", 11, kOnnxOpsetMax, make_factory<DynamicQuantizeKernel>());
}

}  // namespace onebit
