// The two 4-bit weight ops, one kernel (quant/q4_gemm.h):
//
// com.onebit::Q4MatMul — written by the q4 fusion (graph/passes/q4_fusion.cpp).
//   Inputs: 0 x float [..., K], 1 W_q int4/uint4 [K, N] (constant),
//           2 scale float/float16: [ceil(K/bs), N] (block_size > 0), [N] or
//             per tensor (block_size 0), 3 zero point (optional, W_q's type,
//             the scale's shape), 4 bias float [N] (optional).
//   Attributes: block_size (0: per column).
//   Output: float [..., N] = x · ((W_q − zp) · scale) + bias.
//
// com.microsoft::MatMulNBits, bits = 4 or 8 — onnxruntime's contrib op, as
// its quantization tools and onnxruntime-genai's builder write it (8 bits:
// `-p int8`, and the promoted layers of its mixed-precision int4 builds; run
// on the same GEMM as two 4-bit halves, quant/nbits8.h).
//   Inputs: 0 A float or float16 (T1) [..., K], 1 B uint8 [N, ceil(K/bs), bs·bits/8], 2 scales
//           [N·ceil(K/bs)], 3 zero_points (optional: uint8 packed like B,
//           [N·ceil(ceil(K/bs)·bits/8)], or the scales' type [N·ceil(K/bs)]),
//           4 g_idx (optional; only the trivial k / bs), 5 bias T1 [N] (optional).
//   Output: T1. float16 A (transformers.js' model_q4f16 files) is widened to
//   float32, the product computed as for float32 A, each output rounded
//   once to float16 — onnxruntime's CPU result for the same node.
//   Attributes: K, N, bits, block_size, accuracy_level (what `auto`
//   activations follow, below).
//
// Activation precision: the session's KernelOptions::act_precision
// (--act-precision: int8-row (QD8), int8-block, float, or auto), in every
// pass mode, for both ops. auto is kAutoAct below, except on a MatMulNBits
// whose accuracy_level asks for float activations: 1 (float32), 2
// (float16) and 3 (bfloat16) compute in float, as onnxruntime's CPU kernel
// does for all three (it has no float16 or bfloat16 path there); 0 (unset:
// a build for another execution provider) and 4 (int8) take kAutoAct.
#include <algorithm>
#include <cstring>

#include "graph/op_registry.h"
#include "base/thread_pool.h"
#include "base/sizes.h"
#include "ops/device_leg.h"
#include "ops/op_util.h"
#include "quant/nbits8.h"
#include "quant/q4_gemm.h"
#include "quant/qd8_gemm.h"

namespace onebit {

namespace {

// What "auto" runs, decode and prefill alike. docs/parity.md ("Q4NX") has
// the numbers: on SmolLM2 (block 32), against the same packed weights with
// float activations, int8-block adds 0.003 nats of KL, int8-row 0.018 (the
// 4-bit weights themselves cost 0.40); int8-block keeps the integer dot
// products, which prefill at 1.4-1.5x the float path's speed and decode with
// ~35% less CPU per weight byte than the float kernel (docs/BENCHMARK.md).
constexpr Q4Act kAutoAct = Q4Act::kInt8Block;

// `accuracy_level` is a MatMulNBits attribute's (-1: the node has none).
Q4Act act_of(ActPrecision a, int64_t accuracy_level = -1) {
  switch (a) {
    case ActPrecision::kAuto: return accuracy_level >= 1 && accuracy_level <= 3 ? Q4Act::kFloat : kAutoAct;
    case ActPrecision::kInt8Row: return Q4Act::kInt8Row;
    case ActPrecision::kInt8Block: return Q4Act::kInt8Block;
    case ActPrecision::kFloat: return Q4Act::kFloat;
  }
  return kAutoAct;
}

const char* act_name(Q4Act a) {
  switch (a) {
    case Q4Act::kInt8Row: return "int8-row";
    case Q4Act::kInt8Block: return "int8-block";
    case Q4Act::kFloat: return "float";
  }
  return "?";
}

const Tensor& require_constant(const KernelInfo& info, int i, const char* what) {
  const Tensor* t = info.constant(i);
  if (!t) fail("{} ('{}') must be a constant", what, info.input_name(i));
  return *t;
}

Q4FloatType float_type(const Tensor& t, const char* what) {
  if (t.dtype() == DType::F32) return Q4FloatType::kF32;
  if (t.dtype() == DType::F16) return Q4FloatType::kF16;
  fail("{} is {}, expected float32 or float16", what, dtype_name(t.dtype()));
}

// The part shared by both ops: shapes, workspace, the call.
class Q4KernelBase : public Kernel {
 public:
  void reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.shape(0);
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && !(t == DType::F16 && half_ok_))
      fail("input A is {}, expected float32{}", dtype_name(t), half_ok_ ? " or float16" : "");
    if (x.empty() || x.back() != static_cast<int64_t>(input_k()))
      fail("input A has shape {}, expected [..., K={}]", shape_str(x), input_k());
    for (size_t i = 0; i < gemms_.size(); ++i) {
      Shape y = x;
      y.back() = static_cast<int64_t>(gemms_[i]->n());
      ctx.set_output(static_cast<int>(i), t, y);
    }
    const size_t m = static_cast<size_t>(numel(x)) / input_k();
    size_t bytes = Q4Gemm::group_workspace_bytes(members_.data(), members_.size(), m, first().default_act());
    if (device_.bound())
      bytes = std::max(bytes, device_host_bytes(m)) + device_.workspace_bytes(m);
    ctx.set_workspace((t == DType::F16 ? half_bytes(m) : 0) + expanded_bytes(m) + bytes);
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const size_t m = static_cast<size_t>(x.size()) / input_k();
    if (m == 0) return;
    char* workspace = static_cast<char*>(ctx.workspace());
    const bool half = x.dtype() == DType::F16;
    // float16 A (MatMulNBits' T1): widened to float32, the product computed
    // as for float32 A, each output rounded once to float16.
    const float* a = half ? nullptr : x.data<float>();
    float* y[Q4Gemm::kMaxGroup];
    size_t ldy[Q4Gemm::kMaxGroup];
    for (size_t i = 0; i < gemms_.size(); ++i) {
      ldy[i] = gemms_[i]->n();
      if (!half) y[i] = ctx.output(static_cast<int>(i)).data<float>();
    }
    if (half) {
      // The workspace starts with the widened rows, then each output staged.
      auto* wide = reinterpret_cast<float*>(workspace);
      vec_math_config().widen(m * input_k(), x.data<uint16_t>(), wide);
      a = wide;
      float* staged = reinterpret_cast<float*>(workspace + align64(m * input_k() * sizeof(float)));
      for (size_t i = 0; i < gemms_.size(); ++i) {
        y[i] = staged;
        staged += m * ldy[i];
      }
      workspace += half_bytes(m);
    }
    if (device_.routes(m)) {
      run_qd8(m, a, y[0], workspace, &ctx.pool());
    } else {
      if (split_block_) {
        // 8-bit codes split in nibbles: each block of the row read twice.
        NBits8Split::expand_rows(m, input_k(), split_block_, a, input_k(), reinterpret_cast<float*>(workspace));
        a = reinterpret_cast<const float*>(workspace);
        workspace += expanded_bytes(m);
      }
      Q4Gemm::run_group(members_.data(), members_.size(), m, first().default_act(), a, first().k(), y, ldy, workspace,
                        &ctx.pool());
    }
    if (half)
      for (size_t i = 0; i < gemms_.size(); ++i)
        vec_math_config().narrow(m * ldy[i], y[i], ctx.output(static_cast<int>(i)).data<uint16_t>());
  }

  uint64_t packed_bytes() const override {
    uint64_t bytes = 0;
    for (const auto& g : gemms_) bytes += g->decode_bytes();
    return bytes;
  }

  std::string describe() const override {
    const Q4GemmConfig& c = first().config();
    const int a = static_cast<int>(first().default_act());
    std::string n = fmt::format("{}", gemms_[0]->n());
    for (size_t i = 1; i < gemms_.size(); ++i) n += fmt::format("+{}", gemms_[i]->n());
    return fmt::format("Q4 {}x{} {} act {} ({}, {})", first().k(), n, layout_, act_name(first().default_act()),
                       c.gemv_streams[a] ? c.gemv_streams_name[a] : c.gemv_name[a], c.gemm_name[a]);
  }

 protected:
  // The q4 route: `w` is the dequantized weight [K][N]; bias [N] or null.
  void bind_device(const KernelInfo& info, const std::vector<float>& w, const float* bias) {
    if (!info.options().npu) return;
    const size_t k = input_k(), n = first().n();
    const std::vector<int8_t> q = Qd8Gemm::quantize_weight(k, n, w.data(), n, w_scale_);
    device_.bind(info, npu::Route::kQ4, k, n, q.data());
    if (!device_.bound()) return;
    kernel_scale_.resize(n);
    for (size_t j = 0; j < n; ++j) kernel_scale_[j] = Qd8Gemm::kernel_scale(w_scale_[j]);
    if (bias) bias_.assign(bias, bias + n);
  }

  // The weights, one per output (siblings grouped by
  // graph/passes/sibling_matmul.cpp: several).
  void add_gemm(std::unique_ptr<Q4Gemm> g) {
    if (!gemms_.empty() && !Q4Gemm::group_compatible(*gemms_[0], *g))
      fail("weight {} ({}x{}) cannot share a call with the first ({}x{}): K or block differ", gemms_.size(), g->k(),
           g->n(), gemms_[0]->k(), gemms_[0]->n());
    gemms_.push_back(std::move(g));
    members_.push_back(gemms_.back().get());
  }

  std::string layout_;
  // Nonzero for an 8-bit MatMulNBits (quant/nbits8.h): the GEMMs' K is the
  // split K, the input's is input_k_, and each row is expanded before the call.
  size_t split_block_ = 0, input_k_ = 0;
  size_t input_k() const { return split_block_ ? input_k_ : first().k(); }
  // MatMulNBits takes float16 A (and then writes float16 Y): the widened
  // rows and the float32 outputs are staged in the workspace.
  bool half_ok_ = false;
  size_t half_bytes(size_t m) const {
    size_t n = 0;
    for (const auto& g : gemms_) n += g->n();
    return align64(m * input_k() * sizeof(float)) + align64(m * n * sizeof(float));
  }
  size_t expanded_bytes(size_t m) const { return split_block_ ? align64(m * first().k() * sizeof(float)) : 0; }
  // The first weight: K, the activation precision and the config every
  // member shares, and the one weight of a kernel that is not a group.
  const Q4Gemm& first() const { return *gemms_.front(); }

  std::vector<std::unique_ptr<Q4Gemm>> gemms_;
  std::vector<const Q4Gemm*> members_;  // gemms_ as run_group takes them

 private:
  size_t device_host_bytes(size_t m) const {
    return (Qd8Gemm::workspace_bytes_for(q8_gemm_config(), m, input_k()) + 63) / 64 * 64;
  }

  // Rows quantized per row, the int8 product on the device (or, once its
  // design is dead, on the host twin), the qd8 epilogue, then the bias.
  void run_qd8(size_t m, const float* x, float* y, char* workspace, ThreadPool* pool) {
    const size_t k = input_k(), n = first().n();
    const Qd8Gemm::Rows rows = Qd8Gemm::quantize_rows(m, k, x, k, workspace, pool);
    auto* acc = reinterpret_cast<int32_t*>(workspace + device_host_bytes(m));
    if (device_.run(m, rows.q, k, 0, acc)) {
      q8_epilogue(m, n, acc, n, rows.scale, 1, kernel_scale_.data(), Q8Out::kF32, Q8Requant{}, y, n);
    } else {
      if (!twin_)
        twin_ = std::make_unique<Qd8Gemm>(q8_gemm_config(), k, n, device_.dispatcher().weight_of(device_.slot()).data(),
                                          w_scale_);
      twin_->run_rows(m, rows, y, n, workspace, pool);
    }
    if (!bias_.empty())
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) y[i * n + j] += bias_[j];
  }

  DeviceLeg device_;
  std::vector<float> w_scale_;       // [N] per-column int8 scales of the device weight
  std::vector<double> kernel_scale_;  // [N] as the qd8 epilogue multiplies (0 -> 1)
  std::vector<float> bias_;
  std::unique_ptr<Qd8Gemm> twin_;    // the device's host twin, built if its design dies
};

class Q4MatMulKernel : public Q4KernelBase {
 public:
  // One weight: inputs 1..4, or (siblings) 1 + 4i .. 4 + 4i for output i.
  explicit Q4MatMulKernel(const KernelInfo& info) {
    const int weights = info.num_outputs();
    if (weights < 1 || static_cast<size_t>(weights) > Q4Gemm::kMaxGroup ||
        (weights > 1 && info.num_inputs() != 1 + 4 * weights))
      fail("expected x then W, scale, zero point, bias per output; got {} inputs for {} outputs (at most {})",
           info.num_inputs(), weights, Q4Gemm::kMaxGroup);
    if (weights > 1 && info.options().npu) fail("grouped weights do not run on the NPU route");
    for (int i = 0; i < weights; ++i)
      with_context(fmt::format("weight {}", i), [&] { add_member(info, 1 + 4 * i); });
  }
  bool packs_constant(int input) const override { return input >= 1; }

 private:
  void add_member(const KernelInfo& info, int at) {
    const Tensor& w = require_constant(info, at, "the weight");
    if (w.rank() != 2 || (w.dtype() != DType::I4 && w.dtype() != DType::U4))
      fail("the weight is {} {}, expected int4 or uint4 [K, N]", dtype_name(w.dtype()), shape_str(w.shape()));
    const int64_t k = w.dim(0), n = w.dim(1);
    const Tensor& scale = require_constant(info, at + 1, "the scale");
    const Tensor* zp = info.has_input(at + 2) ? &require_constant(info, at + 2, "the zero point") : nullptr;
    if (zp && zp->dtype() != w.dtype())
      fail("the zero point is {}, expected {} like the weight", dtype_name(zp->dtype()), dtype_name(w.dtype()));
    if (zp && zp->shape() != scale.shape())
      fail("the zero point has shape {}, expected the scale's {}", shape_str(zp->shape()), shape_str(scale.shape()));
    const int64_t bs = info.attrs().get_int("block_size", 0);

    std::string layout;
    Q4OnnxWeight q;
    q.k = static_cast<size_t>(k);
    q.n = static_cast<size_t>(n);
    q.is_signed = w.dtype() == DType::I4;
    q.data = static_cast<const uint8_t*>(w.raw());
    q.block_size = static_cast<size_t>(bs);
    q.scale_type = float_type(scale, "the scale");
    q.scales = scale.raw();
    q.zero_points = zp ? static_cast<const uint8_t*>(zp->raw()) : nullptr;
    q.uint4_zero_point = 0;  // DequantizeLinear without a zero point means 0
    if (bs > 0) {
      if (scale.shape() != Shape{(k + bs - 1) / bs, n})
        fail("the scale has shape {}, expected [{}, {}] for K={}, N={}, block_size {}", shape_str(scale.shape()),
             (k + bs - 1) / bs, n, k, n, bs);
      layout = fmt::format("block {}", bs);
    } else if (scale.size() == n) {
      layout = "per channel";
    } else if (scale.size() == 1) {
      // Per tensor: the GEMM takes one scale per column, so repeat it.
      const size_t width = q.scale_type == Q4FloatType::kF32 ? 4 : 2;
      scale_copy_.resize(static_cast<size_t>(n) * width);
      for (int64_t j = 0; j < n; ++j) std::memcpy(&scale_copy_[static_cast<size_t>(j) * width], scale.raw(), width);
      q.scales = scale_copy_.data();
      if (zp) {
        const int z = static_cast<const uint8_t*>(zp->raw())[0] & 15;
        zp_copy_.assign(static_cast<size_t>(n + 1) / 2, static_cast<uint8_t>(z | (z << 4)));
        q.zero_points = zp_copy_.data();
      }
      layout = "per tensor";
    } else {
      fail("the scale has {} values, expected N = {} (per column) or 1 (per tensor) without block_size",
           scale.size(), n);
    }
    Q4GemmOptions opt;
    opt.act = act_of(info.options().act_precision);
    if (info.has_input(at + 3)) {
      const Tensor& b = require_constant(info, at + 3, "the bias");
      if (b.dtype() != DType::F32 || b.size() != n)
        fail("the bias is {} {}, expected float32 [N={}]", dtype_name(b.dtype()), shape_str(b.shape()), n);
      opt.bias = b.data<float>();
    }
    layout += q.is_signed ? " int4" : " uint4";
    if (layout_.empty()) layout_ = layout;
    else if (layout != layout_ && layout_.find(" | ") == std::string::npos) layout_ += " | " + layout;
    add_gemm(std::make_unique<Q4Gemm>(q4_gemm_config(), q, opt, info.pool()));
    if (info.options().npu) bind_device(info, q4_dequantize(q), opt.bias);
  }

  std::vector<uint8_t> scale_copy_, zp_copy_;  // a per-tensor weight's, alive until packed
};

class MatMulNBitsKernel : public Q4KernelBase {
 public:
  // com.microsoft::MatMulNBits: one weight (inputs 1..5), attribute N.
  // com.onebit::MatMulNBitsGroup (graph/passes/sibling_matmul.cpp): 4-bit
  // weights on one A, one per output, inputs 1 + 5i .. 5 + 5i, attribute N
  // the list of their widths, K, bits, block_size and accuracy_level shared.
  MatMulNBitsKernel(const KernelInfo& info, bool group) {
    if (!group) {
      add_member(info, 1, info.attrs().get_int("N"));
      return;
    }
    const std::vector<int64_t> ns = info.attrs().get_ints("N", {});
    const int weights = info.num_outputs();
    if (weights < 1 || static_cast<size_t>(weights) > Q4Gemm::kMaxGroup || ns.size() != static_cast<size_t>(weights) ||
        info.num_inputs() != 1 + 5 * weights)
      fail("expected A then B, scales, zero_points, g_idx, bias per output and N per output; got {} inputs, {} "
           "outputs and {} N (at most {} weights)",
           info.num_inputs(), weights, ns.size(), Q4Gemm::kMaxGroup);
    if (info.attrs().get_int("bits", 4) != 4) fail("attribute bits is {}, a group takes 4", info.attrs().get_int("bits", 4));
    if (info.options().npu) fail("grouped weights do not run on the NPU route");
    for (int i = 0; i < weights; ++i)
      with_context(fmt::format("weight {}", i), [&] { add_member(info, 1 + 5 * i, ns[static_cast<size_t>(i)]); });
  }
  bool packs_constant(int input) const override { return input >= 1; }

 private:
  // The weight of inputs at .. at + 4 (B, scales, zero_points, g_idx, bias), N columns.
  void add_member(const KernelInfo& info, int at, int64_t n) {
    const Attributes& a = info.attrs();
    const int64_t k = a.get_int("K"), bs = a.get_int("block_size");
    const int64_t bits = a.get_int("bits", 4);
    if (bits != 4 && bits != 8) fail("attribute bits is {}, only 4 and 8 are supported", bits);
    if (k <= 0 || n <= 0 || bs <= 0) fail("attributes K={}, N={}, block_size={}, expected all positive", k, n, bs);
    const int64_t blocks = ceil_div(k, bs);
    const int64_t blob = bs * bits / 8;
    const Tensor& b = require_constant(info, at, "input B");
    if (b.dtype() != DType::U8 || b.size() != checked_mul(checked_mul(n, blocks, "N·blocks"), blob, "packed B bytes"))
      fail("input B is {} {}, expected uint8 [N={}, {}, {}]", dtype_name(b.dtype()), shape_str(b.shape()), n, blocks,
           blob);
    const Tensor& scales = require_constant(info, at + 1, "input scales");
    if (scales.size() != n * blocks)
      fail("input scales has {} values {}, expected N·ceil(K/block_size) = {}", scales.size(), shape_str(scales.shape()),
           n * blocks);
    using Z = Q4MatMulNBitsWeight::ZeroPoints;
    Z zero_type = Z::kNone;
    const void* zero_points = nullptr;
    if (info.has_input(at + 2)) {
      const Tensor& zp = require_constant(info, at + 2, "input zero_points");
      // uint8: ceil(blocks·bits/8) bytes a column, the codes' packing.
      const int64_t packed = bits == 4 ? (blocks + 1) / 2 : blocks;
      if (zp.dtype() == DType::U8) {
        if (zp.size() != n * packed)
          fail("input zero_points is uint8 with {} values, expected N·ceil(blocks·bits/8) = {}", zp.size(), n * packed);
        zero_type = Z::kPacked;
      } else {
        if (zp.dtype() != scales.dtype() || zp.size() != n * blocks)
          fail("input zero_points is {} with {} values, expected uint8 packed or {} with {} values",
               dtype_name(zp.dtype()), zp.size(), dtype_name(scales.dtype()), n * blocks);
        zero_type = zp.dtype() == DType::F32 ? Z::kF32 : Z::kF16;
      }
      zero_points = zp.raw();
    }
    if (info.has_input(at + 3)) {
      // g_idx maps each k to its block; only the identity order k / bs is a plain blocked weight.
      const Tensor& g = require_constant(info, at + 3, "input g_idx");
      if (g.size() != k) fail("input g_idx has {} values, expected K = {}", g.size(), k);
      for (int64_t i = 0; i < k; ++i)
        if (tensor_int_at(g, i) != i / bs)
          fail("input g_idx[{}] = {}, expected {}: reordered (act-order) groups are not supported", i,
               tensor_int_at(g, i), i / bs);
    }
    // Out of 0..4 it is clamped, as onnxruntime clamps it.
    const int64_t accuracy_level = std::clamp<int64_t>(a.get_int("accuracy_level", 0), 0, 4);
    Q4GemmOptions opt;
    opt.act = act_of(info.options().act_precision, accuracy_level);
    if (info.has_input(at + 4)) {
      // The bias is T1 like A: float32, or float16 widened once here.
      const Tensor& bias = require_constant(info, at + 4, "input bias");
      if ((bias.dtype() != DType::F32 && bias.dtype() != DType::F16) || bias.size() != n)
        fail("input bias is {} {}, expected float32 or float16 [N={}]", dtype_name(bias.dtype()),
             shape_str(bias.shape()), n);
      if (bias.dtype() == DType::F16) {
        wide_bias_.emplace_back(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) wide_bias_.back()[static_cast<size_t>(j)] = half_to_float(bias.data<uint16_t>()[j]);
        opt.bias = wide_bias_.back().data();
      } else {
        opt.bias = bias.data<float>();
      }
    }
    half_ok_ = true;
    Q4MatMulNBitsWeight q;
    q.k = static_cast<size_t>(k);
    q.n = static_cast<size_t>(n);
    q.block_size = static_cast<size_t>(bs);
    q.b = static_cast<const uint8_t*>(b.raw());
    q.scale_type = float_type(scales, "input scales");
    q.scales = scales.raw();
    q.zero_point_type = zero_type;
    q.zero_points = zero_points;
    if (bits == 8) {
      const NBits8Split split(q, info.pool());
      split_block_ = q.block_size;
      input_k_ = q.k;
      layout_ = fmt::format("MatMulNBits 8-bit block {} (as 4-bit halves, K {})", bs, split.split_k());
      add_gemm(std::make_unique<Q4Gemm>(q4_gemm_config(), split.weight(), opt, info.pool()));
      if (info.options().npu) bind_device(info, nbits8_dequantize(q), opt.bias);
      return;
    }
    layout_ = fmt::format("MatMulNBits block {}", bs);
    add_gemm(std::make_unique<Q4Gemm>(q4_gemm_config(), q, opt, info.pool()));
    if (info.options().npu) bind_device(info, q4_dequantize(q), opt.bias);
  }

  std::vector<std::vector<float>> wide_bias_;  // float16 biases, alive until packed
};

struct MatMulNBitsOne : MatMulNBitsKernel {
  explicit MatMulNBitsOne(const KernelInfo& info) : MatMulNBitsKernel(info, false) {}
};
struct MatMulNBitsGroup : MatMulNBitsKernel {
  explicit MatMulNBitsGroup(const KernelInfo& info) : MatMulNBitsKernel(info, true) {}
};

}  // namespace

void register_q4_matmul_ops(OpRegistry& r) {
  r.add(kOneBitDomain, "Q4MatMul", 1, 1, make_factory<Q4MatMulKernel>());
  r.add(kMicrosoftDomain, "MatMulNBits", 1, 1, make_factory<MatMulNBitsOne>());
  r.add(kOneBitDomain, "MatMulNBitsGroup", 1, 1, make_factory<MatMulNBitsGroup>());
}

}  // namespace onebit
