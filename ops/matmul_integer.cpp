// MatMulInteger (ai.onnx 10-21): Y[int32] = (A - a_zero_point) · (B - b_zero_point)
// with NumPy matmul shapes, A and B each uint8 or int8.
//
// Zero points are per tensor (one element), per row of A ([M], or [..., M, 1]
// with A's batch dims) and per column of B ([N], or [..., 1, N]), as the
// operator spec describes. This is the conformance path: a plain loop; the
// fast int8 GEMMs live in quant/.
#include <algorithm>
#include <cstdint>

#include "ops/dispatch.h"
#include "ops/matmul_shape.h"
#include "graph/op_registry.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

bool byte_type(DType t) { return t == DType::U8 || t == DType::I8; }

// How a zero point maps onto rows of A (or columns of B).
enum class ZpMode { None, Tensor, PerLine, PerBatchLine };

ZpMode zp_mode(const char* which, const Shape& zp, int64_t lines, int64_t batches, const char* line_name) {
  const int64_t count = numel(zp);
  if (count == 1) return ZpMode::Tensor;
  if (count == lines) return ZpMode::PerLine;
  if (count == batches * lines) return ZpMode::PerBatchLine;
  fail("{} has shape {} ({} values), expected 1, {} (one per {}) or {}", which, shape_str(zp), count, lines,
       line_name, batches * lines);
}

class MatMulIntegerKernel : public Kernel {
 public:
  explicit MatMulIntegerKernel(const KernelInfo&) {}

  void reshape(ReshapeContext& ctx) override {
    for (int i = 0; i < 2; ++i)
      if (!byte_type(ctx.dtype(i)))
        fail("input {} is {}, MatMulInteger takes uint8 or int8", i == 0 ? "A" : "B", dtype_name(ctx.dtype(i)));
    const MatMulShape s = matmul_shape(ctx.shape(0), ctx.shape(1));
    for (int i = 2; i < 4; ++i) {
      if (!ctx.has_input(i)) continue;
      if (ctx.dtype(i) != ctx.dtype(i - 2))
        fail("input {} is {}, expected {} like {}", i == 2 ? "a_zero_point" : "b_zero_point",
             dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(i - 2)), i == 2 ? "A" : "B");
    }
    modes(ctx.has_input(2) ? &ctx.shape(2) : nullptr, ctx.has_input(3) ? &ctx.shape(3) : nullptr, s);
    ctx.set_output(0, DType::I32, s.output_shape());
  }

  void run(RunContext& ctx) override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    const Tensor* za = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    const Tensor* zb = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const MatMulShape s = matmul_shape(A.shape(), B.shape());
    // Not a structured binding: lambdas below capture these (clang 14 rejects
    // capturing a binding).
    const std::pair<ZpMode, ZpMode> zm = modes(za ? &za->shape() : nullptr, zb ? &zb->shape() : nullptr, s);
    const ZpMode ma = zm.first, mb = zm.second;
    auto byte_dispatch = [](DType t, auto&& f) {
      if (t == DType::U8) return f(Tag<uint8_t>{});
      return f(Tag<int8_t>{});
    };
    byte_dispatch(A.dtype(), [&](auto ta) {
      using TA = typename decltype(ta)::type;
      byte_dispatch(B.dtype(), [&](auto tb) {
        using TB = typename decltype(tb)::type;
        loop(s, A.data<TA>(), B.data<TB>(), za ? za->data<TA>() : nullptr, ma, zb ? zb->data<TB>() : nullptr, mb,
             ctx.output(0).data<int32_t>(), ctx.pool());
      });
    });
  }

 private:
  static std::pair<ZpMode, ZpMode> modes(const Shape* za, const Shape* zb, const MatMulShape& s) {
    return {za ? zp_mode("a_zero_point", *za, s.m, s.a_batches, "row of A") : ZpMode::None,
            zb ? zp_mode("b_zero_point", *zb, s.n, s.b_batches, "column of B") : ZpMode::None};
  }

  // Index of the zero point for line `line` of the matrix at element offset
  // `offset` (matrices of `size` elements).
  static int64_t zp_index(ZpMode mode, int64_t offset, int64_t size, int64_t lines, int64_t line) {
    switch (mode) {
      case ZpMode::PerLine: return line;
      case ZpMode::PerBatchLine: return (size ? offset / size : 0) * lines + line;
      default: return 0;
    }
  }

  template <class TA, class TB>
  static void loop(const MatMulShape& s, const TA* a, const TB* b, const TA* za, ZpMode ma, const TB* zb, ZpMode mb,
                   int32_t* y, ThreadPool& pool) {
    const int64_t rows = s.batch * s.m;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, s.k * s.n));
    pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t o = r / s.m, i = r % s.m;
        const int64_t a_off = s.a_offset(o), b_off = s.b_offset(o);
        const TA* ar = a + a_off + i * s.k;
        const TB* bm = b + b_off;
        const int32_t zav = za ? za[zp_index(ma, a_off, s.m * s.k, s.m, i)] : 0;
        for (int64_t j = 0; j < s.n; ++j) {
          const int32_t zbv = zb ? zb[zp_index(mb, b_off, s.k * s.n, s.n, j)] : 0;
          uint64_t acc = 0;  // wraps to int32 on store, as an int32 accumulator would
          for (int64_t kk = 0; kk < s.k; ++kk)
            acc += static_cast<uint64_t>(int64_t(int32_t(ar[kk]) - zav) * (int32_t(bm[kk * s.n + j]) - zbv));
          y[r * s.n + j] = static_cast<int32_t>(acc);
        }
      }
    });
  }
};

// com.microsoft::MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point,
// b_zero_point, bias): onnxruntime's fusion of MatMulInteger with its scale
// Mul (and bias Add). A [..., K] uint8/int8, B [K, N] uint8/int8, a_scale a
// scalar, b_scale a scalar or [N], zero points like their scales, bias [N]:
//   Y[..., n] = (Σk (A − a_zp)(B − b_zp)) · a_scale · b_scale[n] + bias[n].
// A plain loop; graph/passes/ort_dynamic_int8.cpp puts the int8 GEMM
// (Qd8MatMul) in its place when a DynamicQuantizeLinear feeds it.
class MatMulIntegerToFloatKernel : public Kernel {
 public:
  explicit MatMulIntegerToFloatKernel(const KernelInfo&) {}

  void reshape(ReshapeContext& ctx) override {
    for (int i : {0, 1})
      if (!byte_type(ctx.dtype(i))) fail("input {} is {}, expected uint8 or int8", i, dtype_name(ctx.dtype(i)));
    const Shape& a = ctx.shape(0);
    const Shape& b = ctx.shape(1);
    if (a.empty() || b.size() != 2 || a.back() != b[0])
      fail("A {} and B {}: expected A [..., K] and B [K, N]", shape_str(a), shape_str(b));
    const int64_t n = b[1];
    for (int i : {2, 3, 6})
      if (ctx.has_input(i) && ctx.dtype(i) != DType::F32) fail("input {} is {}, expected float32", i, dtype_name(ctx.dtype(i)));
    if (numel(ctx.shape(2)) != 1) fail("a_scale has shape {}, expected a scalar", shape_str(ctx.shape(2)));
    if (numel(ctx.shape(3)) != 1 && numel(ctx.shape(3)) != n)
      fail("b_scale has shape {}, expected a scalar or [N={}]", shape_str(ctx.shape(3)), n);
    if (ctx.has_input(5) && numel(ctx.shape(5)) != numel(ctx.shape(3)))
      fail("b_zero_point has shape {}, expected b_scale's {}", shape_str(ctx.shape(5)), shape_str(ctx.shape(3)));
    if (ctx.has_input(6) && numel(ctx.shape(6)) != n) fail("bias has shape {}, expected [N={}]", shape_str(ctx.shape(6)), n);
    Shape y = a;
    y.back() = n;
    ctx.set_output(0, DType::F32, y);
  }

  void run(RunContext& ctx) override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    const int64_t k = B.dim(0), n = B.dim(1), m = k ? A.size() / k : 0;
    const float as = ctx.input(2).data<float>()[0];
    const Tensor& bs = ctx.input(3);
    const int64_t az = ctx.has_input(4) ? tensor_int_at(ctx.input(4), 0) : 0;
    float* y = ctx.output(0).data<float>();
    const float* bias = ctx.has_input(6) ? ctx.input(6).data<float>() : nullptr;
    ctx.pool().parallel_for(m, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t per = bs.size() == 1 ? 0 : j;
          const int64_t bz = ctx.has_input(5) ? tensor_int_at(ctx.input(5), per) : 0;
          int64_t acc = 0;
          for (int64_t i = 0; i < k; ++i) acc += (tensor_int_at(A, r * k + i) - az) * (tensor_int_at(B, i * n + j) - bz);
          y[r * n + j] = static_cast<float>(acc) * as * bs.data<float>()[per] + (bias ? bias[j] : 0.0f);
        }
    });
  }
};

}  // namespace

void register_matmul_integer_ops(OpRegistry& r) {
  r.add("", "MatMulInteger", 10, kOnnxOpsetMax, make_factory<MatMulIntegerKernel>());
  r.add(kMicrosoftDomain, "MatMulIntegerToFloat", 1, 1, make_factory<MatMulIntegerToFloatKernel>());
}

}  // namespace onebit
