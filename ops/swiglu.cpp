// com.onebit::SwiGlu(g, u) — graph/passes/swiglu_fusion.cpp writes it for
// the gated MLP's act_fn(gate) * up with SiLU exported as x * Sigmoid(x):
// y = (g · σ(g)) · u over two tensors of one shape, one pass where the
// graph had three (Sigmoid, Mul, Mul) and two intermediates.
//
// Each step is the unfused node's: σ on the vectorised sigmoid the Sigmoid
// kernel runs (the same value for an element wherever a run cuts), then two
// float32 products, so the output is bit-identical (a NaN's payload aside
// where both factors of the last product are NaN: the kernel multiplies
// silu · u whichever order the graph wrote). float16 g and u (a
// float16 export): each intermediate rounded to float16 as the nodes store
// it — σ(g) narrowed, g · σ widened from both float16 values and narrowed,
// then · u likewise.
#include <algorithm>
#include <cstdint>

#include "graph/op_registry.h"
#include "ops/op_util.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

constexpr int64_t kRun = 256;  // elements a chunk, on the stack

void swiglu_f32(int64_t n, const float* g, const float* u, float* y) {
  const F32VUnaryUkernel sigmoid = vec_math_config().sigmoid;
  float s[kRun];
  for (int64_t i = 0; i < n; i += kRun) {
    const int64_t m = std::min(kRun, n - i);
    sigmoid(static_cast<size_t>(m), g + i, s);
    for (int64_t k = 0; k < m; ++k) {
      const float silu = g[i + k] * s[k];
      y[i + k] = silu * u[i + k];
    }
  }
}

void swiglu_f16(int64_t n, const uint16_t* g, const uint16_t* u, uint16_t* y) {
  const VecMathConfig& vm = vec_math_config();
  float a[kRun], b[kRun];
  uint16_t h[kRun];
  for (int64_t i = 0; i < n; i += kRun) {
    const size_t m = static_cast<size_t>(std::min(kRun, n - i));
    vm.widen(m, g + i, a);
    vm.sigmoid(m, a, b);
    vm.narrow(m, b, h);  // Sigmoid's float16 output
    vm.widen(m, h, b);
    for (size_t k = 0; k < m; ++k) b[k] = a[k] * b[k];
    vm.narrow(m, b, h);  // the first Mul's
    vm.widen(m, h, a);
    vm.widen(m, u + i, b);
    for (size_t k = 0; k < m; ++k) a[k] = a[k] * b[k];
    vm.narrow(m, a, y + i);  // the second Mul's
  }
}

class SwiGluKernel : public Kernel {
 public:
  explicit SwiGluKernel(const KernelInfo&) {}

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if ((t != DType::F32 && t != DType::F16) || ctx.dtype(1) != t)
      fail("inputs are {} and {}, expected both float32 or both float16", dtype_name(t), dtype_name(ctx.dtype(1)));
    if (ctx.shape(0) != ctx.shape(1))
      fail("gate {} and up {} differ in shape (the fusion takes equal shapes only)", shape_str(ctx.shape(0)),
           shape_str(ctx.shape(1)));
    ctx.set_output(0, t, ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& G = ctx.input(0);
    const Tensor& U = ctx.input(1);
    Tensor& Y = ctx.output(0);
    if (G.dtype() == DType::F16) {
      const uint16_t *g = G.data<uint16_t>(), *u = U.data<uint16_t>();
      uint16_t* y = Y.data<uint16_t>();
      return ctx.pool().parallel_for(G.size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        swiglu_f16(e - b, g + b, u + b, y + b);
      });
    }
    const float *g = G.data<float>(), *u = U.data<float>();
    float* y = Y.data<float>();
    ctx.pool().parallel_for(G.size(), kElementwiseGrain,
                            [&](int64_t b, int64_t e) { swiglu_f32(e - b, g + b, u + b, y + b); });
  }
};

}  // namespace

void register_swiglu_op(OpRegistry& r) { r.add(kOneBitDomain, "SwiGlu", 1, 1, make_factory<SwiGluKernel>()); }

}  // namespace onebit
