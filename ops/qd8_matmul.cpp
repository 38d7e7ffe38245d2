// com.onebit::Qd8MatMul(x float [..., K], W constant float [K, N]) —
// written by the --int8 pass (graph/passes/qd8_matmul.cpp), run by
// quant/qd8_gemm.h; with an NPU design for its (K, N), the int8 product of
// the quantized rows runs on the device and returns to the same epilogue.
#include "graph/op_registry.h"
#include "base/thread_pool.h"
#include "ops/device_leg.h"
#include "quant/qd8_gemm.h"

namespace onebit {

namespace {

class Qd8MatMulKernel : public Kernel {
 public:
  explicit Qd8MatMulKernel(const KernelInfo& info) {
    const Tensor* w = info.constant(1);
    if (!w || w->rank() != 2 || w->dtype() != DType::F32)
      fail("the weight ('{}') must be a constant float32 [K, N] tensor", info.input_name(1));
    const size_t k = static_cast<size_t>(w->dim(0)), n = static_cast<size_t>(w->dim(1));
    std::vector<float> scales;
    const std::vector<int8_t> q = Qd8Gemm::quantize_weight(k, n, w->data<float>(), n, scales);
    gemm_ = std::make_unique<Qd8Gemm>(q8_gemm_config(), k, n, q.data(), scales);
    device_.bind(info, npu::Route::kQd8, k, n, q.data());
  }
  bool packs_constant(int input) const override { return input == 1; }

  void reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.shape(0);
    if (ctx.dtype(0) != DType::F32) fail("input A is {}, expected float32", dtype_name(ctx.dtype(0)));
    if (x.empty() || x.back() != static_cast<int64_t>(gemm_->k()))
      fail("input A has shape {}, expected [..., K={}]", shape_str(x), gemm_->k());
    Shape y = x;
    y.back() = static_cast<int64_t>(gemm_->n());
    ctx.set_output(0, DType::F32, y);
    const size_t m = static_cast<size_t>(numel(x) / static_cast<int64_t>(gemm_->k()));
    ctx.set_workspace(host_bytes(m) + device_.workspace_bytes(m));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t m = static_cast<size_t>(x.size()) / gemm_->k();
    if (m == 0) return;
    float* y = ctx.output(0).data<float>();
    if (device_.bound()) {
      const Qd8Gemm::Rows rows = gemm_->quantize_rows(m, x.data<float>(), gemm_->k(), ctx.workspace(), &ctx.pool());
      auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(ctx.workspace()) + host_bytes(m));
      if (device_.run(m, rows.q, gemm_->k(), 0, acc)) return gemm_->epilogue(m, rows, acc, gemm_->n(), y, gemm_->n());
      return gemm_->run_rows(m, rows, y, gemm_->n(), ctx.workspace(), &ctx.pool());
    }
    gemm_->run(m, x.data<float>(), gemm_->k(), y, gemm_->n(), ctx.workspace(), &ctx.pool());
  }
  std::string describe() const override {
    return fmt::format("qd8 {}x{} {}{}", gemm_->k(), gemm_->n(), gemm_->gemm().config().gemm_name,
                       device_.bound() ? " + npu" : "");
  }

 private:
  size_t host_bytes(size_t m) const { return (gemm_->workspace_bytes(m) + 63) / 64 * 64; }
  DeviceLeg device_;
  std::unique_ptr<Qd8Gemm> gemm_;
};

}  // namespace

void register_qd8_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "Qd8MatMul", 1, 1, make_factory<Qd8MatMulKernel>());
}

}  // namespace onebit
