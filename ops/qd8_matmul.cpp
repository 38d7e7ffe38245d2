// com.onebit::Qd8MatMul(x float [..., K], W constant float [K, N]) —
// written by the --int8 pass (graph/passes/qd8_matmul.cpp), run by
// quant/qd8_gemm.h.
#include "graph/op_registry.h"
#include "base/thread_pool.h"
#include "quant/qd8_gemm.h"

namespace onebit {

namespace {

class Qd8MatMulKernel : public Kernel {
 public:
  explicit Qd8MatMulKernel(const KernelInfo& info) {
    const Tensor* w = info.constant(1);
    if (!w || w->rank() != 2 || w->dtype() != DType::F32)
      fail("the weight ('{}') must be a constant float32 [K, N] tensor", info.input_name(1));
    gemm_ = std::make_unique<Qd8Gemm>(q8_gemm_config(), static_cast<size_t>(w->dim(0)),
                                              static_cast<size_t>(w->dim(1)), w->data<float>());
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
    ctx.set_workspace(gemm_->workspace_bytes(static_cast<size_t>(numel(x) / static_cast<int64_t>(gemm_->k()))));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t m = static_cast<size_t>(x.size()) / gemm_->k();
    if (m == 0) return;
    gemm_->run(m, x.data<float>(), gemm_->k(), ctx.output(0).data<float>(), gemm_->n(), ctx.workspace(),
               &ctx.pool());
  }
  std::string describe() const override {
    return fmt::format("dynamic int8 {}x{} {}", gemm_->k(), gemm_->n(), gemm_->gemm().config().gemm_name);
  }

 private:
  std::unique_ptr<Qd8Gemm> gemm_;
};

}  // namespace

void register_qd8_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "Qd8MatMul", 1, 1, make_factory<Qd8MatMulKernel>());
}

}  // namespace onebit
