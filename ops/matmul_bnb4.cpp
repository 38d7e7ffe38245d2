// com.microsoft::MatMulBnb4(A T1 [..., K], B uint8 [ceil(N·K/2)], absmax T1
// [ceil(N·K/block_size)]) -> Y T1 [..., N]; attributes K, N, block_size,
// quant_type (0 FP4, 1 NF4); T1 float or float16. The 4-bit codes index a
// table of non-uniform values (quant/bnb4.h), so the weight is dequantized
// once at create to float32 and packed into the float GEMM's panels (8
// times the bnb4 bytes a step reads, the float32 model's); each product is
// then the float GEMM's (onnxruntime's CPU kernel also dequantizes first).
// float16 A is widened, and each output rounded once to float16.
#include <string>

#include "base/dtype.h"
#include "base/sizes.h"
#include "graph/op_registry.h"
#include "ops/op_util.h"
#include "ops/sgemm.h"
#include "quant/bnb4.h"

namespace onebit {

namespace {

class MatMulBnb4Kernel : public Kernel {
 public:
  explicit MatMulBnb4Kernel(const KernelInfo& info) {
    const Attributes& a = info.attrs();
    const int64_t k = a.get_int("K"), n = a.get_int("N"), bs = a.get_int("block_size");
    const int64_t type = a.get_int("quant_type");
    if (k <= 0 || n <= 0 || bs <= 0) fail("attributes K={}, N={}, block_size={}, expected all positive", k, n, bs);
    if (type != 0 && type != 1) fail("attribute quant_type is {}, expected 0 (FP4) or 1 (NF4)", type);
    const int64_t total = checked_mul(n, k, "N·K");
    const Tensor* b = info.constant(1);
    if (!b || b->dtype() != DType::U8 || b->size() != ceil_div(total, 2))
      fail("input B ('{}') must be a constant uint8 tensor of ceil(N·K/2) = {} bytes", info.input_name(1),
           ceil_div(total, 2));
    const Tensor* absmax = info.constant(2);
    if (!absmax || (absmax->dtype() != DType::F32 && absmax->dtype() != DType::F16) ||
        absmax->size() != ceil_div(total, bs))
      fail("input absmax ('{}') must be a constant float or float16 tensor of ceil(N·K/block_size) = {} values",
           info.input_name(2), ceil_div(total, bs));
    Bnb4Weight w;
    w.k = static_cast<size_t>(k);
    w.n = static_cast<size_t>(n);
    w.block_size = static_cast<size_t>(bs);
    w.type = type == 0 ? Bnb4Type::kFP4 : Bnb4Type::kNF4;
    w.b = static_cast<const uint8_t*>(b->raw());
    w.absmax_f16 = absmax->dtype() == DType::F16;
    w.absmax = absmax->raw();
    const std::vector<float> wt = bnb4_dequantize_transposed(w);
    packed_ = PackedB(sgemm_config(), w.k, w.n, wt.data(), w.k, /*trans_b=*/true, info.pool(),
                      info.options().huge_pages);
    name_ = fmt::format("MatMulBnb4 {} block {}, {}x{} as float32 panels", type == 0 ? "FP4" : "NF4", bs, k, n);
  }

  bool packs_constant(int input) const override { return input >= 1; }
  uint64_t packed_bytes() const override { return packed_.bytes(); }
  std::string describe() const override { return name_; }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16) fail("input A is {}, expected float32 or float16", dtype_name(t));
    const Shape& x = ctx.shape(0);
    if (x.empty() || x.back() != static_cast<int64_t>(packed_.k()))
      fail("input A has shape {}, expected [..., K={}]", shape_str(x), packed_.k());
    Shape y = x;
    y.back() = static_cast<int64_t>(packed_.n());
    ctx.set_output(0, t, y);
    const size_t m = static_cast<size_t>(numel(x)) / packed_.k();
    ctx.set_workspace((t == DType::F16 ? half_bytes(m) : 0) + sgemm_packed_workspace(packed_, m, false));
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t k = packed_.k(), n = packed_.n(), m = static_cast<size_t>(x.size()) / k;
    if (m == 0) return;
    char* ws = static_cast<char*>(ctx.workspace());
    if (x.dtype() == DType::F32) {
      sgemm_packed(m, x.data<float>(), k, false, packed_, nullptr, ctx.output(0).data<float>(), n, ws, &ctx.pool());
      return;
    }
    auto* a = reinterpret_cast<float*>(ws);
    auto* y = reinterpret_cast<float*>(ws + align64(m * k * sizeof(float)));
    vec_math_config().widen(m * k, x.data<uint16_t>(), a);
    sgemm_packed(m, a, k, false, packed_, nullptr, y, n, ws + half_bytes(m), &ctx.pool());
    vec_math_config().narrow(m * n, y, ctx.output(0).data<uint16_t>());
  }

 private:
  // float16 A: the widened rows and the float32 outputs, staged.
  size_t half_bytes(size_t m) const {
    return align64(m * packed_.k() * sizeof(float)) + align64(m * packed_.n() * sizeof(float));
  }

  PackedB packed_;
  std::string name_;
};

}  // namespace

void register_matmul_bnb4_op(OpRegistry& r) {
  r.add(kMicrosoftDomain, "MatMulBnb4", 1, 1, make_factory<MatMulBnb4Kernel>());
}

}  // namespace onebit
