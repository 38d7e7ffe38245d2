// onnxruntime's dynamic int8 (onnxruntime.quantization.quantize_dynamic)
// onto the qd8 GEMM. quantize_dynamic writes, per float MatMul,
//
//   x --DynamicQuantizeLinear--> x_q, x_scale, x_zp
//   MatMulInteger(x_q, W_q, x_zp, w_zp) --Cast(float)--> acc
//   Mul(x_scale, w_scale) --> s;   Mul(acc, s) --> y        (either operand order)
//
// and onnxruntime's own fusions turn the tail into
// com.microsoft::MatMulIntegerToFloat(x_q, W_q, x_scale, w_scale, x_zp, w_zp, bias).
// Either becomes
//
//   com.onebit::Qd8MatMul(x, W_q, w_scale, w_zp[, bias])
//
// the int8 GEMM with the graph's weight codes and scales and the activation
// quantized per row by the kernel (quant/qd8_gemm.h: amax/127 per row, a
// finer grid than the graph's one uint8 scale per tensor; the results differ
// from node-by-node execution by that rounding). Preconditions: W_q a
// constant int8/uint8 [K, N] whose codes less w_zp fit int8, w_scale a
// constant float scalar or [N], w_zp a constant (or absent), the
// intermediate values read by nothing else. The DynamicQuantizeLinear may
// feed several MatMuls (q, k, v share one); it goes once none reads it.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct OrtInt8Group {
  int anchor = -1;  // the node rewritten: the last Mul, or MatMulIntegerToFloat
  int x = -1;       // DynamicQuantizeLinear's float input
  int w = -1, w_scale = -1, w_zp = -1, bias = -1;
  std::vector<int> swallowed;  // MatMulInteger, Cast, scale Mul
};

// The DynamicQuantizeLinear whose outputs 0 and 2 are `q` and `zp` (and 1 `scale`, when given).
const Node* dql_of(const Graph& g, int q, int zp, int scale = -1) {
  const Node* d = producer_op(g, q, "DynamicQuantizeLinear");
  if (!d || d->outputs.size() < 3 || d->outputs[0] != q || d->outputs[2] != zp) return nullptr;
  if (scale >= 0 && d->outputs[1] != scale) return nullptr;
  return d;
}

Match<OrtInt8Group> check_weight(const Graph& g, OrtInt8Group grp) {
  const Value& w = g.value(grp.w);
  if (!w.constant) return Refusal{"weight_not_constant"};
  if (w.constant->rank() != 2) return Refusal{"weight_rank"};
  if (w.constant->dtype() != DType::I8 && w.constant->dtype() != DType::U8) return Refusal{"weight_dtype"};
  const int64_t n = w.constant->dim(1);
  const Value& s = g.value(grp.w_scale);
  if (!s.constant || s.constant->dtype() != DType::F32 || (s.constant->size() != 1 && s.constant->size() != n))
    return Refusal{"weight_scale"};
  if (grp.w_zp >= 0) {
    const Value& z = g.value(grp.w_zp);
    if (!z.constant || z.constant->dtype() != w.constant->dtype() || z.constant->size() != s.constant->size())
      return Refusal{"weight_zero_point"};
    // Codes less the zero point must be int8 (uint8 weights with zp 128 are; zp 0 is not).
    const Tensor& q = *w.constant;
    const Tensor& zt = *z.constant;
    for (int64_t i = 0; i < q.size(); ++i) {
      const int64_t v = tensor_int_at(q, i) - tensor_int_at(zt, zt.size() == 1 ? 0 : i % n);
      if (v < -128 || v > 127) return Refusal{"weight_not_int8"};
    }
  } else if (w.constant->dtype() == DType::U8) {
    return Refusal{"weight_not_int8"};  // uint8 codes with zero point 0
  }
  if (grp.bias >= 0) {
    const Value& b = g.value(grp.bias);
    if (!b.constant || b.constant->dtype() != DType::F32 || b.constant->size() != n) return Refusal{"bias"};
  }
  return grp;
}

// MatMulInteger → Cast → Mul(·, Mul(x_scale, w_scale)), anchored on the last Mul.
Match<OrtInt8Group> match_tail(const FusionScan& scan, const Node& mul, int node) {
  const Graph& g = scan.g;
  for (int side = 0; side < 2; ++side) {
    const int acc = mul.inputs[static_cast<size_t>(side)], sv = mul.inputs[static_cast<size_t>(1 - side)];
    const Node* cast = producer_op(g, acc, "Cast");
    if (!cast || cast->attrs.get_int("to", 0) != static_cast<int64_t>(DType::F32)) continue;
    const Node* mmi = producer_op(g, cast->inputs[0], "MatMulInteger");
    const Node* smul = producer_op(g, sv, "Mul");
    if (!mmi || !smul || mmi->inputs.size() < 3 || mmi->inputs[2] < 0) continue;
    const Node* d = dql_of(g, mmi->inputs[0], mmi->inputs[2]);
    if (!d) continue;
    int w_scale = -1;
    for (int k = 0; k < 2; ++k)
      if (smul->inputs[static_cast<size_t>(k)] == d->outputs[1]) w_scale = smul->inputs[static_cast<size_t>(1 - k)];
    if (w_scale < 0) continue;
    if (!only_reader(scan, acc, node) || !only_reader(scan, cast->inputs[0], producer_index(g, acc)) ||
        !only_reader(scan, sv, node))
      return Refusal{"intermediate_shared"};
    OrtInt8Group grp;
    grp.anchor = node;
    grp.x = d->inputs[0];
    grp.w = mmi->inputs[1];
    grp.w_scale = w_scale;
    grp.w_zp = mmi->inputs.size() > 3 ? mmi->inputs[3] : -1;
    grp.swallowed = {producer_index(g, acc), producer_index(g, cast->inputs[0]), producer_index(g, sv)};
    return check_weight(g, grp);
  }
  return {};
}

Match<OrtInt8Group> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type == "Mul" && n.domain.empty() && n.inputs.size() == 2) return match_tail(scan, n, node);
  if (n.op_type == "MatMulIntegerToFloat" && n.domain == kMicrosoftDomain && n.inputs.size() >= 4) {
    const int zp = n.inputs.size() > 4 ? n.inputs[4] : -1;
    const Node* d = zp >= 0 ? dql_of(g, n.inputs[0], zp, n.inputs[2]) : nullptr;
    if (!d) return Refusal{"activation_not_dynamic"};
    OrtInt8Group grp;
    grp.anchor = node;
    grp.x = d->inputs[0];
    grp.w = n.inputs[1];
    grp.w_scale = n.inputs[3];
    grp.w_zp = n.inputs.size() > 5 ? n.inputs[5] : -1;
    grp.bias = n.inputs.size() > 6 ? n.inputs[6] : -1;
    return check_weight(g, grp);
  }
  return {};
}

}  // namespace

void fuse_ort_dynamic_int8(Graph& g, PassContext& ctx) {
  Fusion<OrtInt8Group> f;
  f.name = "ort_int8";
  f.match = match;
  f.apply = [](Graph& g, const OrtInt8Group& m, std::vector<bool>& drop, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.anchor);
    std::vector<int> inputs{m.x, m.w, m.w_scale, m.w_zp};
    if (m.bias >= 0) inputs.push_back(m.bias);
    make_onebit_node(n, "Qd8MatMul", inputs);
    n.attrs = Attributes();
    for (int s : m.swallowed) drop[static_cast<size_t>(s)] = true;
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
