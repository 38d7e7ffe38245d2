// com.onebit::Qd8MatMul(x float [..., K], W constant float [K, N]) —
// written by the --int8 pass (graph/passes/qd8_matmul.cpp), run by
// quant/qd8_gemm.h; with an NPU design for its (K, N), the int8 product of
// the quantized rows runs on the device and returns to the same epilogue.
//
// With W already quantized — Qd8MatMul(x, W_q int8/uint8 [K, N], w_scale
// float [] or [N], w_zero_point (optional, W_q's type, [] or [N]), bias
// float [N] (optional)), what graph/passes/ort_dynamic_int8.cpp writes for
// onnxruntime's quantize_dynamic graphs, and com.microsoft::
// DynamicQuantizeMatMul with the same inputs — the weight's codes less its
// zero point are the int8 weight (they must fit in int8) and its scale the
// column scales; the activations are quantized per row as above.
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
    if (w && (w->dtype() == DType::I8 || w->dtype() == DType::U8)) {
      prequantized(info, *w);
      return;
    }
    if (!w || w->rank() != 2 || w->dtype() != DType::F32)
      fail("the weight ('{}') must be a constant float32 [K, N] tensor", info.input_name(1));
    const size_t k = static_cast<size_t>(w->dim(0)), n = static_cast<size_t>(w->dim(1));
    std::vector<float> scales;
    const std::vector<int8_t> q = Qd8Gemm::quantize_weight(k, n, w->data<float>(), n, scales);
    gemm_ = std::make_unique<Qd8Gemm>(q8_gemm_config(), k, n, q.data(), scales);
    device_.bind(info, npu::Route::kQd8, k, n, q.data());
  }
  bool packs_constant(int input) const override { return input == 1; }
  uint64_t packed_bytes() const override { return gemm_->gemm().decode_bytes(); }

  // W_q, its scale and zero point as the graph gives them.
  void prequantized(const KernelInfo& info, const Tensor& w) {
    if (w.rank() != 2) fail("input B ('{}') has shape {}, expected [K, N]", info.input_name(1), shape_str(w.shape()));
    const size_t k = static_cast<size_t>(w.dim(0)), n = static_cast<size_t>(w.dim(1));
    const Tensor* s = info.has_input(2) ? info.constant(2) : nullptr;
    if (!s || s->dtype() != DType::F32 || (s->size() != 1 && s->size() != static_cast<int64_t>(n)))
      fail("input b_scale must be a constant float32 scalar or [N={}]", n);
    const Tensor* z = info.has_input(3) ? info.constant(3) : nullptr;
    if (info.has_input(3) && (!z || z->dtype() != w.dtype() || (z->size() != 1 && z->size() != static_cast<int64_t>(n))))
      fail("input b_zero_point must be a constant {} scalar or [N={}] like B", dtype_name(w.dtype()), n);
    const bool u8 = w.dtype() == DType::U8;
    auto code = [&](const Tensor& t, int64_t i) -> int32_t {
      return u8 ? static_cast<int32_t>(t.data<uint8_t>()[i]) : static_cast<int32_t>(t.data<int8_t>()[i]);
    };
    std::vector<int8_t> q(k * n);
    std::vector<float> scales(n);
    for (size_t j = 0; j < n; ++j) scales[j] = s->data<float>()[s->size() == 1 ? 0 : j];
    for (size_t i = 0; i < k; ++i)
      for (size_t j = 0; j < n; ++j) {
        const int32_t zp = z ? code(*z, z->size() == 1 ? 0 : static_cast<int64_t>(j)) : 0;
        const int32_t v = code(w, static_cast<int64_t>(i * n + j)) - zp;
        if (v < -128 || v > 127)
          fail("input B code {} less zero point {} at [{}, {}] leaves int8: the weight is not symmetric int8", v + zp,
               zp, i, j);
        q[i * n + j] = static_cast<int8_t>(v);
      }
    if (info.has_input(4)) {
      const Tensor* b = info.constant(4);
      if (!b || b->dtype() != DType::F32 || b->size() != static_cast<int64_t>(n))
        fail("input bias must be a constant float32 [N={}]", n);
      bias_.assign(b->data<float>(), b->data<float>() + n);
    }
    gemm_ = std::make_unique<Qd8Gemm>(q8_gemm_config(), k, n, q.data(), scales);
    device_.bind(info, npu::Route::kQd8, k, n, q.data());
  }

  void reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.shape(0);
    if (ctx.dtype(0) != DType::F32) fail("input A is {}, expected float32", dtype_name(ctx.dtype(0)));
    if (x.empty() || x.back() != static_cast<int64_t>(gemm_->k()))
      fail("input A has shape {}, expected [..., K={}]", shape_str(x), gemm_->k());
    Shape y = x;
    y.back() = static_cast<int64_t>(gemm_->n());
    ctx.set_output(0, DType::F32, y);
    const size_t m = gemm_->k() ? static_cast<size_t>(numel(x) / static_cast<int64_t>(gemm_->k())) : 0;
    ctx.set_workspace(host_bytes(m) + device_.workspace_bytes(m));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (gemm_->k() == 0) {  // an empty inner dimension: every output is the bias, or 0
      Tensor& out = ctx.output(0);
      float* y = out.data<float>();
      const size_t n = gemm_->n();
      for (size_t i = 0; i < static_cast<size_t>(out.size()); ++i) y[i] = bias_.empty() ? 0.0f : bias_[i % n];
      return;
    }
    const size_t m = static_cast<size_t>(x.size()) / gemm_->k();
    if (m == 0) return;
    float* y = ctx.output(0).data<float>();
    if (device_.bound()) {
      const Qd8Gemm::Rows rows = gemm_->quantize_rows(m, x.data<float>(), gemm_->k(), ctx.workspace(), &ctx.pool());
      auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(ctx.workspace()) + host_bytes(m));
      if (device_.run(m, rows.q, gemm_->k(), 0, acc)) gemm_->epilogue(m, rows, acc, gemm_->n(), y, gemm_->n());
      else gemm_->run_rows(m, rows, y, gemm_->n(), ctx.workspace(), &ctx.pool());
    } else {
      gemm_->run(m, x.data<float>(), gemm_->k(), y, gemm_->n(), ctx.workspace(), &ctx.pool());
    }
    const size_t n = gemm_->n();
    if (!bias_.empty())
      for (size_t r = 0; r < m; ++r)
        for (size_t j = 0; j < n; ++j) y[r * n + j] += bias_[j];
  }
  std::string describe() const override {
    return fmt::format("qd8 {}x{} {}{}", gemm_->k(), gemm_->n(), gemm_->gemm().config().gemm_name,
                       device_.bound() ? " + npu" : "");
  }

 private:
  size_t host_bytes(size_t m) const { return (gemm_->workspace_bytes(m) + 63) / 64 * 64; }
  DeviceLeg device_;
  std::unique_ptr<Qd8Gemm> gemm_;
  std::vector<float> bias_;  // [N], prequantized weights only
};

}  // namespace

void register_qd8_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "Qd8MatMul", 1, 1, make_factory<Qd8MatMulKernel>());
  // onnxruntime's fused dynamic int8 MatMul: A float, B int8/uint8 constant, b_scale, b_zero_point, bias.
  r.add(kMicrosoftDomain, "DynamicQuantizeMatMul", 1, 1, make_factory<Qd8MatMulKernel>());
}

}  // namespace onebit
