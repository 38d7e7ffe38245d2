// torch.onnx's TorchScript exporter writes scaled_dot_product_attention's
// scale as a square root on each side of the product:
//
//   MatMul(Mul(q, √s), Mul(Transpose(k, 0,1,3,2), √s))
//
// which hides the keys' Transpose behind a Mul from the GQA fusion (so the
// repeated keys are copied every step and the cache cannot be kept in the
// session). This pass writes it as the eager export does,
//
//   MatMul(q, Transpose(k)) -> Mul(·, √s·√s)
//
// for the passes after it (GQA, KV state, the mask handed to the scores).
// The same formula; the scale is applied to the sums instead of to each
// factor, so scores agree to rounding, not bit for bit (exactly when √s is a
// power of two). Only where both factors are scaled by a scalar constant
// (rank 0 or 1, so no broadcast changes a shape) of one type and the two
// Muls are read by nothing else. A float16 graph (an export converted to
// float16, as transformers.js' model_fp16.onnx) gets a float16 scale, √s·√s
// rounded once, where its product rounded each factor to float16.
#include <cmath>
#include <limits>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {
namespace {

// `value` = Mul(x, c) or Mul(c, x), c a float32 or float16 scalar constant
// of rank <= 1: x, c and c's type, else false.
bool scaled_by_constant(const Graph& g, int value, int& x, double& c, DType& type) {
  const Node* mul = producer_op(g, value, "Mul");
  if (!mul || mul->inputs.size() != 2) return false;
  for (int side = 0; side < 2; ++side) {
    const Tensor* t = input_constant(g, *mul, static_cast<size_t>(side));
    const auto s = constant_scalar(g, mul->inputs[static_cast<size_t>(side)]);
    if (!t || !s || (t->dtype() != DType::F32 && t->dtype() != DType::F16) || t->rank() > 1) continue;
    x = mul->inputs[static_cast<size_t>(1 - side)];
    c = *s;
    type = t->dtype();
    return x >= 0;
  }
  return false;
}

struct SdpaScales {
  int node = -1;  // the MatMul
  int q = -1, kt = -1;
  float scale = 0;
  DType type = DType::F32;  // the scale's (the graph's float type)
};

Match<SdpaScales> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) return {};
  int q, kt;
  double sq, sk;
  DType tq, tk;
  if (!scaled_by_constant(g, n.inputs[0], q, sq, tq) || !scaled_by_constant(g, n.inputs[1], kt, sk, tk)) return {};
  if (tq != tk) return Refusal{"scales_of_two_types"};
  const Node* t = producer_op(g, kt, "Transpose");
  if (!t || t->attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 1, 3, 2}) return {};
  if (!only_reader(scan, n.inputs[0], node) || !only_reader(scan, n.inputs[1], node))
    return Refusal{"scaled_factor_read_elsewhere"};
  // One scale for the two: not when their product leaves the type's range
  // (or is NaN), where the factors' own roundings would matter.
  const double most = tq == DType::F16 ? 65504.0 : std::numeric_limits<float>::max();
  if (!(std::abs(sq * sk) <= most)) return {};
  return SdpaScales{node, q, kt, static_cast<float>(sq * sk), tq};
}

}  // namespace

void fold_sdpa_scales(Graph& g, PassContext& ctx) {
  const std::vector<SdpaScales> found = find_groups<SdpaScales>(g, ctx, "sdpa_scales", match);
  // From the last back, so the indices of earlier nodes stay valid.
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const int out = g.node(it->node).outputs[0];
    const std::string base = g.node(it->node).name;
    Value raw;
    raw.name = g.unique_name(base + "/unscaled");
    raw.dtype = g.value(out).dtype;
    const int raw_id = g.add_value(std::move(raw));
    const int scale_id = add_scalar_constant(g, base + "/scale", it->scale, it->type);
    Node& m = g.node(it->node);
    m.inputs = {it->q, it->kt};
    m.outputs = {raw_id};
    Node mul;
    mul.name = g.unique_name(base + "/scale");
    mul.op_type = "Mul";
    mul.opset = m.opset;
    mul.inputs = {raw_id, scale_id};
    mul.outputs = {out};
    g.nodes.insert(g.nodes.begin() + it->node + 1, std::move(mul));
  }
  if (!found.empty()) g.relink();
  ctx.report.count("sdpa_scales_folded", static_cast<int64_t>(found.size()));
}

}  // namespace onebit
