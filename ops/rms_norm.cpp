// com.onebit::RmsNorm(x [..., D], w [D]), epsilon — graph/rms_norm_fusion.cpp
// writes it. y = w · (x · 1/sqrt(mean(x²) + eps)), each step in float32 in
// the order of the unfused graph (Pow as x·x, ReduceMean's 16-lane sum then
// the division, Add, Sqrt, Reciprocal, Mul, Mul), so the fused output is
// bit-identical to the nodes it replaces.
//
// float16 x and w (a float16 export's norm: Cast to float, the chain, Cast
// to float16, Mul by w in float16): the row widened to float32, the chain
// as above, x · 1/rms rounded to float16 (the Cast), then w · that rounded
// to float16 (the float16 Mul: a product of two float16 values is exact in
// float32, so one rounding) — bit for bit the nodes it replaces.
#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/op_registry.h"
#include "base/thread_pool.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// Mean of squares with the lane structure of ops/reduce.cpp's ReduceMean:
// 16 independent sums over full groups merged in order, then the tail.
float mean_of_squares(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float a = 0;
  int64_t i = 0;
  if (n >= 2 * kLanes) {
    float lanes[kLanes] = {};
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lanes[j] += x[i + j] * x[i + j];
    for (int j = 0; j < kLanes; ++j) a += lanes[j];
  }
  for (; i < n; ++i) a += x[i] * x[i];
  return a / static_cast<float>(n);
}

class RmsNormKernel : public Kernel {
 public:
  explicit RmsNormKernel(const KernelInfo& info) : epsilon_(info.attrs().get_float("epsilon", 1e-6f)) {}

  void reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.shape(0);
    const DType t = ctx.dtype(0);
    if ((t != DType::F32 && t != DType::F16) || ctx.dtype(1) != t)
      fail("inputs are {} and {}, expected both float32 or both float16", dtype_name(t), dtype_name(ctx.dtype(1)));
    if (x.empty() || ctx.shape(1) != Shape{x.back()})
      fail("weight {} does not match the last dim of x {}", shape_str(ctx.shape(1)), shape_str(x));
    ctx.set_output(0, t, x);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int64_t d = X.shape().back();
    const int64_t rows = d ? X.size() / d : 0;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1));
    const float eps = epsilon_;
    if (X.dtype() == DType::F16) {
      const uint16_t* x = X.data<uint16_t>();
      const uint16_t* wh = ctx.input(1).data<uint16_t>();
      uint16_t* y = ctx.output(0).data<uint16_t>();
      const VecMathConfig& vm = vec_math_config();
      const size_t n = static_cast<size_t>(d);
      return ctx.pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> w(n), row(n);
        std::vector<uint16_t> rounded(n);
        vm.widen(n, wh, w.data());
        for (int64_t r = begin; r < end; ++r) {
          vm.widen(n, x + r * d, row.data());
          const float inv = 1.0f / std::sqrt(mean_of_squares(row.data(), d) + eps);
          for (size_t i = 0; i < n; ++i) row[i] *= inv;
          vm.narrow(n, row.data(), rounded.data());  // the Cast to float16
          vm.widen(n, rounded.data(), row.data());
          for (size_t i = 0; i < n; ++i) row[i] = w[i] * row[i];
          vm.narrow(n, row.data(), y + r * d);  // the float16 Mul's rounding
        }
      });
    }
    const float* x = X.data<float>();
    const float* w = ctx.input(1).data<float>();
    float* y = ctx.output(0).data<float>();
    ctx.pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * d;
        float* yr = y + r * d;
        const float inv = 1.0f / std::sqrt(mean_of_squares(xr, d) + eps);
        for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
      }
    });
  }

 private:
  float epsilon_;
};

}  // namespace

void register_rms_norm_op(OpRegistry& r) { r.add(kOneBitDomain, "RmsNorm", 1, 1, make_factory<RmsNormKernel>()); }

}  // namespace onebit
