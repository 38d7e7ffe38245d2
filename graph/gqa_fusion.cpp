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
#include "graph/fusions.h"
#include "graph/match.h"

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
  const Node* expand = producer_op(g, reshape->inputs[0], "Expand");
  if (!expand || expand->inputs.size() < 2) return false;
  const Node* unsqueeze = producer_op(g, expand->inputs[0], "Unsqueeze");
  if (!unsqueeze || unsqueeze->inputs.size() < 2) return false;
  if (!constant_ints_equal(g, unsqueeze->inputs[1], {2}) && !constant_ints_equal(g, unsqueeze->inputs[1], {-3})) return false;
  out = {unsqueeze->inputs[0], expand->inputs[1], reshape->inputs[1], reshape->attrs.get_int("allowzero", 0)};
  return true;
}

}  // namespace

void fuse_gqa_matmul(Graph& g, const SessionOptions&, PassReport& report, ThreadPool&) {
  int64_t fused = 0;
  for (Node& n : g.nodes) {
    if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2) continue;
    Repeat rep;
    int64_t trans_b = 0;
    if (const Node* t = producer_op(g, n.inputs[1], "Transpose")) {
      if (t->attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 1, 3, 2} || !match_repeat(g, t->inputs[0], rep))
        continue;
      trans_b = 1;
    } else if (!match_repeat(g, n.inputs[1], rep)) {
      continue;
    }
    make_onebit_node(n, "GqaMatMul", {n.inputs[0], rep.kv, rep.expand_shape, rep.reshape_shape});
    set_int_attr(n, "transB", trans_b);
    set_int_attr(n, "allowzero", rep.allowzero);
    ++fused;
  }
  if (fused) g.relink();
  report.count("gqa_matmul", fused);
}

}  // namespace onebit
