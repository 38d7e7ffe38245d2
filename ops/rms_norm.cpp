// com.onebit::RmsNorm(x [..., D], w [D]), epsilon — graph/rms_norm_fusion.cpp
// writes it. y = w · (x · 1/sqrt(mean(x²) + eps)), each step in float32 in
// the order of the unfused graph (Pow as x·x, ReduceMean's 16-lane sum then
// the division, Add, Sqrt, Reciprocal, Mul, Mul), so the fused output is
// bit-identical to the nodes it replaces.
#include <cmath>

#include "graph/op_registry.h"
#include "base/thread_pool.h"

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
    if (ctx.dtype(0) != DType::F32 || ctx.dtype(1) != DType::F32)
      fail("inputs are {} and {}, expected float32", dtype_name(ctx.dtype(0)), dtype_name(ctx.dtype(1)));
    if (x.empty() || ctx.shape(1) != Shape{x.back()})
      fail("weight {} does not match the last dim of x {}", shape_str(ctx.shape(1)), shape_str(x));
    ctx.set_output(0, DType::F32, x);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int64_t d = X.shape().back();
    const int64_t rows = d ? X.size() / d : 0;
    const float* x = X.data<float>();
    const float* w = ctx.input(1).data<float>();
    float* y = ctx.output(0).data<float>();
    const float eps = epsilon_;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1));
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
