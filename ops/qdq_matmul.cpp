// com.onebit::QDQMatMul — the fused QDQ group (graph/passes/qdq_fusion.cpp
// writes it) run by the exact integer GEMM of quant/q8_gemm.h, or, when the
// session has an NPU dispatcher with a design for its (K, N), on the device:
// the device's int32 accumulators (quant/q8_device.h) come back into the
// same epilogue, so both give the same bits.
//
// Inputs: 0 x_q [..., K] int8/uint8, 1 x_scale, 2 x_zero_point (optional),
//         3 w_q [K, N] int8/uint8 (constant), 4 w_scale, 5 w_zero_point,
//         6 y_scale, 7 y_zero_point (both present when a QuantizeLinear was folded in).
// Attributes: x_per_row (x scale/zp per row of a 2-D x), w_per_column,
//             x_type (ONNX dtype of x_q), output_dtype.
// Output: float32 [..., N], or int8/uint8 (the folded QuantizeLinear's type).
#include <cstdio>

#include "graph/op_registry.h"
#include "base/thread_pool.h"
#include "ops/device_leg.h"
#include "quant/q8_device.h"
#include "quant/q8_gemm.h"

namespace onebit {

namespace {

Q8Type q8_type(DType t, const char* what) {
  if (t == DType::I8) return Q8Type::kS8;
  if (t == DType::U8) return Q8Type::kU8;
  fail("{} is {}, expected int8 or uint8", what, dtype_name(t));
}

const Tensor& require_constant(const KernelInfo& info, int i, const char* what) {
  const Tensor* t = info.constant(i);
  if (!t) fail("{} ('{}') must be a constant", what, info.input_name(i));
  return *t;
}

std::vector<float> floats_of(const Tensor& t, const char* what) {
  if (t.dtype() != DType::F32) fail("{} is {}, expected float32", what, dtype_name(t.dtype()));
  return std::vector<float>(t.data<float>(), t.data<float>() + t.size());
}

std::vector<int32_t> ints_of(const Tensor* t) {
  std::vector<int32_t> v;
  if (t)
    for (int64_t i = 0; i < t->size(); ++i) v.push_back(static_cast<int32_t>(tensor_int_at(*t, i)));
  return v;
}

class QdqMatMulKernel : public Kernel {
 public:
  explicit QdqMatMulKernel(const KernelInfo& info) {
    const Attributes& a = info.attrs();
    x_per_row_ = a.get_int("x_per_row", 0) != 0;
    x_type_ = static_cast<DType>(a.get_int("x_type", static_cast<int64_t>(DType::U8)));
    const Tensor& w = require_constant(info, 3, "the weight");
    if (w.rank() != 2) fail("the weight has shape {}, expected [K, N]", shape_str(w.shape()));
    w_scale_ = floats_of(require_constant(info, 4, "the weight scale"), "the weight scale");
    w_zp_ = ints_of(info.constant(5));
    if (info.has_input(5) && !info.constant(5)) fail("the weight zero point must be a constant");
    x_scale_ = floats_of(require_constant(info, 1, "the activation scale"), "the activation scale");
    x_zp_ = ints_of(info.constant(2));
    if (info.has_input(2) && !info.constant(2)) fail("the activation zero point must be a constant");
    if (info.has_input(2)) x_type_ = info.constant(2)->dtype();
    const int64_t n = w.dim(1);
    if (w_scale_.size() != 1 && static_cast<int64_t>(w_scale_.size()) != n)
      fail("the weight scale has {} values, expected 1 or N = {}", w_scale_.size(), n);
    if (!w_zp_.empty() && w_zp_.size() != w_scale_.size())
      fail("the weight zero point has {} values, its scale {}", w_zp_.size(), w_scale_.size());
    if (!x_zp_.empty() && x_zp_.size() != x_scale_.size())
      fail("the activation zero point has {} values, its scale {}", x_zp_.size(), x_scale_.size());

    Q8Weight aw;
    aw.k = static_cast<size_t>(w.dim(0));
    aw.n = static_cast<size_t>(n);
    aw.type = q8_type(w.dtype(), "the weight");
    aw.data = w.raw();
    aw.scale = w_scale_.data();
    aw.scale_count = w_scale_.size();
    aw.zero_point = w_zp_.empty() ? nullptr : w_zp_.data();
    aw.zero_point_count = w_zp_.empty() ? 1 : w_zp_.size();
    aw.x_type = q8_type(x_type_, "the activation");
    gemm_ = std::make_unique<Q8Gemm>(aw);
    if (info.options().npu) {
      device_w_ = q8_device_weight(aw);
      device_.bind(info, npu::Route::kQdq, aw.k, aw.n, device_w_.w.data());
      device_w_.w = {};  // the device holds it now
    }

    if (info.has_input(6)) {
      const std::vector<float> ys = floats_of(require_constant(info, 6, "the output scale"), "the output scale");
      if (ys.size() != 1) fail("the output scale must be per tensor, has {} values", ys.size());
      rq_.scale = ys[0];
      DType out = static_cast<DType>(a.get_int("output_dtype", 0));
      if (info.has_input(7)) {
        const Tensor& zp = require_constant(info, 7, "the output zero point");
        out = zp.dtype();
        rq_.zero_point = static_cast<int32_t>(tensor_int_at(zp, 0));
      }
      if (out == DType::Undefined) out = DType::U8;  // QuantizeLinear's default
      rq_.type = q8_type(out, "the output");
      out_type_ = out;
      quantized_ = true;
    }
  }

  bool packs_constant(int input) const override { return input == 3; }
  uint64_t packed_bytes() const override { return gemm_->decode_bytes(); }

  void reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.shape(0);
    if (x.empty() || x.back() != static_cast<int64_t>(gemm_->k()))
      fail("input x has shape {}, expected [..., K={}]", shape_str(x), gemm_->k());
    if (ctx.dtype(0) != x_type_)
      fail("input x is {}, the fused group was built for {}", dtype_name(ctx.dtype(0)), dtype_name(x_type_));
    const int64_t m = numel(x) / static_cast<int64_t>(gemm_->k());
    if (x_per_row_ && (x.size() != 2 || static_cast<size_t>(m) != x_scale_.size()))
      fail("input x has shape {}, the per-row scale holds {} rows", shape_str(x), x_scale_.size());
    Shape y = x;
    y.back() = static_cast<int64_t>(gemm_->n());
    ctx.set_output(0, quantized_ ? out_type_ : DType::F32, y);
    ctx.set_workspace(host_bytes(static_cast<size_t>(m)) + device_.workspace_bytes(static_cast<size_t>(m)));
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const size_t k = gemm_->k(), n = gemm_->n();
    const size_t m = static_cast<size_t>(x.size()) / k;
    if (m == 0) return;
    Q8Activation xp;
    xp.scale = x_scale_.data();
    xp.scale_count = x_scale_.size();
    xp.zero_point = x_zp_.empty() ? nullptr : x_zp_.data();
    xp.zero_point_count = x_zp_.empty() ? 1 : x_zp_.size();
    auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(ctx.workspace()) + host_bytes(m));
    if (device_.run(m, x.raw(), k, q8_device_flip(gemm_->x_type()), acc)) {
      q8_device_to_exact(m, x.raw(), k, gemm_->x_type(), xp, device_w_, acc, n);
      if (quantized_) gemm_->epilogue(m, acc, n, xp, rq_, y.raw(), n);
      else gemm_->epilogue(m, acc, n, xp, y.data<float>(), n);
      return;
    }
    if (quantized_)
      gemm_->run(m, x.raw(), k, xp, rq_, y.raw(), n, ctx.workspace(), &ctx.pool());
    else
      gemm_->run(m, x.raw(), k, xp, y.data<float>(), n, ctx.workspace(), &ctx.pool());
  }

  std::string describe() const override {
    return fmt::format("qdq {}x{} {} x_zp={} w_zp={} {}{}", gemm_->k(), gemm_->n(), gemm_->config().gemm_name,
                       x_zp_.size(), w_zp_.size(), quantized_ ? "int8 out" : "float out",
                       device_.bound() ? " + npu" : "");
  }

 private:
  size_t host_bytes(size_t m) const { return (gemm_->workspace_bytes(m) + 63) / 64 * 64; }

  bool x_per_row_ = false, quantized_ = false;
  DType x_type_ = DType::U8, out_type_ = DType::F32;
  std::vector<float> x_scale_, w_scale_;
  std::vector<int32_t> x_zp_, w_zp_;
  Q8OutputQuant rq_;
  std::unique_ptr<Q8Gemm> gemm_;
  Q8DeviceWeight device_w_;  // column sums and weight offsets for the device's accumulators
  DeviceLeg device_;
};

}  // namespace

void register_qdq_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "QDQMatMul", 1, 1, make_factory<QdqMatMulKernel>());
}

}  // namespace onebit
