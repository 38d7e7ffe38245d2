// Gemm (ai.onnx 11-21; 11 made C optional, later versions only add types): Y = alpha·op(A)·op(B) + beta·C, op = transpose when
// transA / transB, C broadcast one way to [M,N] (ONNX "unidirectional").
//
// float32 runs through sgemm, with a constant B packed (transposed or not) at
// create. The usual exported Linear — alpha = beta = 1 and C a row of N
// biases — folds C into the GEMM as its bias; anything else is an epilogue
// pass over Y. Other types take a plain loop.
#include <algorithm>
#include <memory>
#include <type_traits>

#include "ops/dispatch.h"
#include "ops/matmul_shape.h"
#include "graph/op_registry.h"
#include "ops/sgemm.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

struct GemmDims {
  int64_t m = 0, k = 0, n = 0;
  // Element steps of C along the rows and columns of Y (0: broadcast).
  int64_t c_row = 0, c_col = 0;
  bool has_c = false;
};

class GemmKernel : public Kernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : trans_a_(info.attrs().get_int("transA", 0) != 0),
        trans_b_(info.attrs().get_int("transB", 0) != 0),
        alpha_(info.attrs().get_float("alpha", 1.0f)),
        beta_(info.attrs().get_float("beta", 1.0f)),
        config_(&sgemm_config()) {
    const Tensor* b = info.constant(1);
    if (b && b->dtype() == DType::F32 && b->rank() == 2) {
      const size_t rows = static_cast<size_t>(b->dim(0)), cols = static_cast<size_t>(b->dim(1));
      packed_ = std::make_unique<PackedB>(*config_, trans_b_ ? cols : rows, trans_b_ ? rows : cols, b->data<float>(),
                                          cols, trans_b_, nullptr, info.options().huge_pages);
    }
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (ctx.dtype(1) != t) fail("inputs are {} and {}; Gemm needs one type", dtype_name(t), dtype_name(ctx.dtype(1)));
    if (ctx.has_input(2) && ctx.dtype(2) != t)
      fail("input C is {}, expected {} like A", dtype_name(ctx.dtype(2)), dtype_name(t));
    if (!matmul_dtype(t)) unsupported_dtype("Gemm", t);
    const GemmDims d = dims(ctx.shape(0), ctx.shape(1), ctx.has_input(2) ? &ctx.shape(2) : nullptr);
    ctx.set_output(0, t, {d.m, d.n});
    if (t != DType::F32) return;
    const size_t m = static_cast<size_t>(d.m), n = static_cast<size_t>(d.n), k = static_cast<size_t>(d.k);
    ctx.set_workspace(packed_ ? sgemm_packed_workspace(*packed_, m, trans_a_)
                              : sgemm_workspace(*config_, m, n, k, trans_a_, trans_b_));
  }

  void run(RunContext& ctx) override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    const Tensor* C = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& Y = ctx.output(0);
    const GemmDims d = dims(A.shape(), B.shape(), C ? &C->shape() : nullptr);
    if (d.m == 0 || d.n == 0) return;
    if (A.dtype() == DType::F32) return run_f32(d, A, B, C, Y, ctx);
    dispatch_numeric(A.dtype(), "Gemm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      gemm_loop<T>(d, A.data<T>(), B.data<T>(), C ? C->data<T>() : nullptr, Y.data<T>(), ctx.pool());
    });
  }

  std::string describe() const override {
    return fmt::format("f32{} {} / {}", packed_ ? " B packed" : "", config_->gemm_name, config_->gemv_name);
  }

 private:
  GemmDims dims(const Shape& a, const Shape& b, const Shape* c) const {
    if (a.size() != 2) fail("input A has shape {}, expected rank 2", shape_str(a));
    if (b.size() != 2) fail("input B has shape {}, expected rank 2", shape_str(b));
    GemmDims d;
    d.m = trans_a_ ? a[1] : a[0];
    d.k = trans_a_ ? a[0] : a[1];
    const int64_t kb = trans_b_ ? b[1] : b[0];
    d.n = trans_b_ ? b[0] : b[1];
    if (kb != d.k)
      fail("input B has shape {} (transB={}), expected K={} to match A {} (transA={})", shape_str(b), int(trans_b_),
           d.k, shape_str(a), int(trans_a_));
    if (!c || beta_ == 0.0f) return d;  // beta = 0: C does not contribute
    d.has_c = true;
    // Right-aligned: [N], [1,N], [M,1], [M,N], [] and [1] all broadcast.
    const int64_t rows = c->size() == 2 ? (*c)[0] : 1;
    const int64_t cols = c->empty() ? 1 : c->back();
    if (c->size() > 2 || (rows != 1 && rows != d.m) || (cols != 1 && cols != d.n))
      fail("input C has shape {}, which does not broadcast to [{},{}]", shape_str(*c), d.m, d.n);
    d.c_row = rows == 1 ? 0 : cols;
    d.c_col = cols == 1 ? 0 : 1;
    return d;
  }

  void run_f32(const GemmDims& d, const Tensor& A, const Tensor& B, const Tensor* C, Tensor& Y,
               RunContext& ctx) const {
    const size_t m = static_cast<size_t>(d.m), n = static_cast<size_t>(d.n), k = static_cast<size_t>(d.k);
    const size_t lda = static_cast<size_t>(A.dim(1));
    // C as the GEMM's bias: a row of N values added unscaled.
    const bool bias = d.has_c && alpha_ == 1.0f && beta_ == 1.0f && d.c_row == 0 && d.c_col == 1;
    const float* bias_p = bias ? C->data<float>() : nullptr;
    float* y = Y.data<float>();
    if (packed_) {
      sgemm_packed(m, A.data<float>(), lda, trans_a_, *packed_, bias_p, y, n, ctx.workspace(), &ctx.pool());
    } else {
      sgemm(*config_, m, n, k, A.data<float>(), lda, trans_a_, B.data<float>(), static_cast<size_t>(B.dim(1)),
            trans_b_, bias_p, y, n, ctx.workspace(), &ctx.pool());
    }
    if (bias || (alpha_ == 1.0f && !d.has_c)) return;
    const float* c = d.has_c ? C->data<float>() : nullptr;
    const float alpha = alpha_, beta = beta_;
    ctx.pool().parallel_for(d.m, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d.n)), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          float& v = y[i * d.n + j];
          v = c ? alpha * v + beta * c[i * d.c_row + j * d.c_col] : alpha * v;
        }
    });
  }

  // The plain path. Integers accumulate wrapping; alpha and beta scale them
  // through double only when they are not 1.
  template <class T>
  void gemm_loop(const GemmDims& d, const T* a, const T* b, const T* c, T* y, ThreadPool& pool) const {
    using D = DotArith<T>;
    using C = typename D::Acc;
    // Element (i, kk) of op(A) and (kk, j) of op(B) in their stored layouts.
    const int64_t as_i = trans_a_ ? 1 : d.k, as_k = trans_a_ ? d.m : 1;
    const int64_t bs_k = trans_b_ ? 1 : d.n, bs_j = trans_b_ ? d.k : 1;
    const bool unit = alpha_ == 1.0f && beta_ == 1.0f;
    pool.parallel_for(d.m, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          C acc = 0;
          for (int64_t kk = 0; kk < d.k; ++kk) acc += D::load(a[i * as_i + kk * as_k]) * D::load(b[kk * bs_k + j * bs_j]);
          const C cv = d.has_c ? D::load(c[i * d.c_row + j * d.c_col]) : C(0);
          T& out = y[i * d.n + j];
          if (unit) {
            out = D::store(static_cast<C>(acc + cv));
          } else if constexpr (std::is_integral_v<T>) {
            out = static_cast<T>(double(alpha_) * double(static_cast<T>(acc)) + double(beta_) * double(static_cast<T>(cv)));
          } else {
            out = D::store(static_cast<C>(static_cast<C>(alpha_) * acc + static_cast<C>(beta_) * cv));
          }
        }
    });
  }

  bool trans_a_, trans_b_;
  float alpha_, beta_;
  const SgemmConfig* config_;
  std::unique_ptr<PackedB> packed_;  // constant float32 B as op(B) = [K,N] in panels
};

}  // namespace

void register_gemm_ops(OpRegistry& r) { r.add("", "Gemm", 11, kOnnxOpsetMax, make_factory<GemmKernel>()); }

}  // namespace onebit
