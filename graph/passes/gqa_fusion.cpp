// Grouped-query attention products without materialising the repeated K/V.
// transformers' repeat_kv exports as Unsqueeze → Expand → Reshape, which
// copies every KV head `rep` times per layer and step (and K once more for
// its Transpose); at a 1024-token past that is ~1 GB of copies a token for
// Qwen3-0.6B. Both products read the unrepeated tensor instead:
//
//   K [b,kvh,T,d] -Unsqueeze(2)-> -Expand(e)-> -Reshape(r)-> -Transpose(0,1,3,2)-> MatMul(Q, ·)
//       becomes com.onebit::GqaMatMul(Q, K, e, r) transB = 1      -> [b,h,S,T]
//   V [b,kvh,T,d] -Unsqueeze(2)-> -Expand(e)-> -Reshape(r)-> MatMul(P, ·)
//       becomes com.onebit::GqaMatMul(P, V, e, r) transB = 0      -> [b,h,S,d]
//
// The shapes e and r are only known at plan time; the kernel checks there
// that they are a repeat of each KV head (e = [b,kvh,rep,T,d],
// r = [b,kvh·rep,T,d]) and refuses the plan otherwise, naming the shapes.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct Repeat {
  int kv = -1, expand_shape = -1, reshape_shape = -1;
  int64_t allowzero = 0;
};

// value -> Reshape(Expand(Unsqueeze(kv, [2]), e), r): the repeat_kv chain.
bool match_repeat(const Graph& g, int value, Repeat& out) {
  const Node* reshape = producer_op(g, value, "Reshape");
  if (!reshape || reshape->inputs.size() < 2) return false;
  const Node* expand = producer_op(g, input_at(*reshape, 0), "Expand");
  if (!expand || expand->inputs.size() < 2) return false;
  const Node* unsqueeze = producer_op(g, input_at(*expand, 0), "Unsqueeze");
  if (!unsqueeze || unsqueeze->inputs.size() < 2) return false;
  if (!constant_ints_equal(g, input_at(*unsqueeze, 1), {2}) && !constant_ints_equal(g, input_at(*unsqueeze, 1), {-3})) return false;
  out = {input_at(*unsqueeze, 0), input_at(*expand, 1), input_at(*reshape, 1), reshape->attrs.get_int("allowzero", 0)};
  return true;
}

struct GqaGroup {
  int node = -1;  // the MatMul
  Repeat rep;
  int64_t trans_b = 0;
};

// A MatMul whose B is a repeat_kv chain (through the K Transpose for
// Q·Kᵀ). A chain behind a Transpose of another permutation is refused.
Match<GqaGroup> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2) return {};
  GqaGroup grp{node, {}, 0};
  if (const Node* t = producer_op(g, n.inputs[1], "Transpose")) {
    if (!match_repeat(g, input_at(*t, 0), grp.rep)) return {};
    if (t->attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 1, 3, 2}) return Refusal{"transpose_perm"};
    grp.trans_b = 1;
  } else if (!match_repeat(g, n.inputs[1], grp.rep)) {
    return {};
  }
  return grp;
}

}  // namespace

void fuse_gqa_matmul(Graph& g, PassContext& ctx) {
  Fusion<GqaGroup> f;
  f.name = "gqa";
  f.match = match;
  f.apply = [](Graph& g, const GqaGroup& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.node);
    make_onebit_node(n, "GqaMatMul", {n.inputs[0], m.rep.kv, m.rep.expand_shape, m.rep.reshape_shape});
    set_int_attr(n, "transB", m.trans_b);
    set_int_attr(n, "allowzero", m.rep.allowzero);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
