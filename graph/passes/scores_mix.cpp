// Attention in one node over the KV state: the scores GqaMatMul that
// carries its chain (·scale, + mask, Softmax: graph/passes/masked_scores.cpp)
// and the P·V GqaMatMul that alone reads its P become one GqaMatMul with the
// values as inputs 6 and 7 (ops/gqa_matmul.cpp). Its kernel computes each
// block of a prompt's rows (scores, chain, P·V) while the block's P is in
// cache, where the two nodes wrote the whole P [b,h,S,T] to memory, half of
// it the causal zeros, and read it back: a 2048-token prompt of SmolLM2
// wrote and read 151 MB a layer. The output is the P·V node's bit for bit.
//
//   GqaMatMul(Q, K, e, r, k_stride, mask) softmax = 1 -> P
//   GqaMatMul(P, V, e, r, v_stride)                    -> Y
// becomes
//   GqaMatMul(Q, K, e, r, k_stride, mask, V, v_stride) softmax = 1 -> Y
//
// It needs both over the KV state (inputs 4), Q and P both float32 or both
// float16 (a float16 export: the kernel rounds each block's P to float16
// and widens it again, as the scores node's output and the P·V node's
// input do, and rounds the output once), one repeat for
// both (the same kv_repeat, or the same values as the repeat's shapes,
// inputs 2 and 3, read with the same allowzero: the kernel checks them
// against the values too), and P read by the P·V node alone. A mask of
// undeclared shape (mask_any_shape) is fused too: the kernel takes the
// blocks when it is rows over the scores, and else computes P whole and
// then P·V, as the two nodes do.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct ScoresMix {
  int scores = -1;  // the scores GqaMatMul
  int mix = -1;     // the P·V GqaMatMul (the anchor: rewritten in place)
};

bool is_gqa(const Node& n) { return n.op_type == "GqaMatMul" && n.domain == kOneBitDomain; }

bool over_state(const Node& n) { return input_at(n, 4) >= 0 && n.outputs.size() == 1 && n.outputs[0] >= 0; }

Match<ScoresMix> match_scores_mix(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& mix = g.node(node);
  if (!is_gqa(mix) || mix.attrs.get_int("transB", 0) != 0 || !over_state(mix) || input_at(mix, 0) < 0 ||
      input_at(mix, 1) < 0)
    return {};
  const int p = mix.inputs[0];
  const int s = producer_index(g, p);
  if (s < 0) return {};
  const Node& scores = g.node(s);
  if (!is_gqa(scores) || scores.attrs.get_int("transB", 0) != 1 || scores.attrs.get_int("softmax", 0) != 1 ||
      input_at(scores, 5) < 0 || input_at(mix, 5) >= 0 || input_at(scores, 6) >= 0)
    return {};
  if (!over_state(scores)) return Refusal{"scores_not_over_the_kv_state"};
  if (scores.attrs.get_int("kv_repeat", 0) != mix.attrs.get_int("kv_repeat", 0) ||
      scores.attrs.get_int("allowzero", 0) != mix.attrs.get_int("allowzero", 0) ||
      input_at(scores, 2) != input_at(mix, 2) || input_at(scores, 3) != input_at(mix, 3))
    return Refusal{"keys_and_values_repeated_differently"};
  // P is the scores node's output, of its Q's dtype (a value the passes
  // made may not record it: Q undefined is taken as P's).
  const DType pt = value_dtype(g, p), qt = value_dtype(g, scores.inputs[0]);
  if ((pt != DType::F32 && pt != DType::F16) || (qt != pt && qt != DType::Undefined))
    return Refusal{"scores_not_float32_or_float16"};
  if (!only_reader(scan, p, node)) return Refusal{"p_read_elsewhere"};
  return ScoresMix{s, node};
}

}  // namespace

void fuse_scores_mix(Graph& g, PassContext& ctx) {
  Fusion<ScoresMix> f;
  f.name = "scores_mix";
  f.match = match_scores_mix;
  f.apply = [](Graph& g, const ScoresMix& c, std::vector<bool>& drop, std::map<std::string, int64_t>&) {
    const Node& scores = g.node(c.scores);
    Node& mix = g.node(c.mix);
    std::vector<int> inputs = scores.inputs;
    inputs.resize(6, -1);
    inputs.push_back(mix.inputs[1]);  // V
    inputs.push_back(mix.inputs[4]);  // its heads' stride
    mix.inputs = std::move(inputs);
    mix.attrs = scores.attrs;
    drop[static_cast<size_t>(c.scores)] = true;
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
