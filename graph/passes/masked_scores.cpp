// Hands attention's mask to the scores product, so a prompt's causal half
// is not computed. transformers' eager attention exports as
//
//   GqaMatMul(Q, K) transB = 1 -> Mul(·, s) -> Add(·, mask) -> Softmax(last axis) -> P
//
// (the GQA fusion wrote the GqaMatMul). Where that chain is all that reads
// each intermediate, the mask becomes the GqaMatMul's input 5 and s its
// attribute `score_scale`; the Mul, Add and Softmax stay as they are. The
// kernel (ops/gqa_matmul.cpp) may then leave out the trailing masked run of
// a row and write 0 there, when it can show that Softmax's output does not
// change by a bit: the left-out scores are bounded by |q|·|k|·|s|, too small
// to lift a masked score near the row's maximum.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct MaskedScores {
  int node = -1;  // the GqaMatMul
  int mask = -1;
  float scale = 0;
};

// The Softmax axis is the last one of a rank-4 input: -1 or 3, or the
// default of opset 13 and later (-1; earlier opsets flatten from axis 1).
bool softmax_over_last(const Node& softmax) {
  const int64_t axis = softmax.attrs.get_int("axis", softmax.opset >= 13 ? -1 : 1);
  return axis == -1 || axis == 3;
}

Match<MaskedScores> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "GqaMatMul" || n.domain != kOneBitDomain || n.attrs.get_int("transB", 0) != 1 ||
      n.outputs.size() != 1 || n.outputs[0] < 0)
    return {};
  if (n.inputs.size() > 5 && n.inputs[5] >= 0) return {};  // already given one
  const int scores = n.outputs[0];
  const auto& r0 = scan.readers[static_cast<size_t>(scores)];
  if (r0.size() != 1) return {};
  const Node& mul = g.node(r0[0]);
  if (mul.op_type != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 || mul.outputs.size() != 1) return {};
  const std::optional<double> s = constant_scalar(g, other_input(mul, scores));
  if (!s) return Refusal{"scale_not_a_constant_scalar"};
  if (!(std::abs(*s) < 1e30)) return Refusal{"scale_not_finite"};
  if (!only_reader(scan, scores, r0[0])) return Refusal{"scores_read_elsewhere"};
  const int scaled = mul.outputs[0];
  const auto& r1 = scan.readers[static_cast<size_t>(scaled)];
  if (r1.size() != 1 || !only_reader(scan, scaled, r1[0])) return Refusal{"scaled_read_elsewhere"};
  const Node& add = g.node(r1[0]);
  if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2 || add.outputs.size() != 1)
    return Refusal{"no_mask_add"};
  const int mask = other_input(add, scaled);
  if (mask < 0) return Refusal{"no_mask_add"};
  const int masked = add.outputs[0];
  const auto& r2 = scan.readers[static_cast<size_t>(masked)];
  if (r2.size() != 1 || !only_reader(scan, masked, r2[0])) return Refusal{"masked_read_elsewhere"};
  const Node& softmax = g.node(r2[0]);
  if (softmax.op_type != "Softmax" || !softmax.domain.empty()) return Refusal{"no_softmax"};
  if (!softmax_over_last(softmax)) return Refusal{"softmax_not_over_keys"};
  // The mask becomes an earlier node's input: it must exist by then.
  if (producer_index(g, mask) > node) return Refusal{"mask_computed_later"};
  return MaskedScores{node, mask, static_cast<float>(*s)};
}

}  // namespace

void give_scores_their_mask(Graph& g, PassContext& ctx) {
  Fusion<MaskedScores> f;
  f.name = "masked_scores";
  f.match = match;
  f.apply = [](Graph& g, const MaskedScores& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.node);
    if (n.inputs.size() < 6) n.inputs.resize(6, -1);
    n.inputs[5] = m.mask;
    set_float_attr(n, "score_scale", m.scale);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
