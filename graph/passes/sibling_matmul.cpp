// Sibling weight GEMMs on one input:
//
//   x --F16wMatMul(·, Wq)--> q        x --F16wMatMul(·, Wq, Wk, Wv)--> q, k, v
//   x --F16wMatMul(·, Wk)--> k   =>
//   x --F16wMatMul(·, Wv)--> v
//
// A decoder layer reads its normed input three times (q, k, v) and the MLP
// reads its own twice (gate, up). Each GEMM is one parallel call with its
// own start (the first stream's misses) and its own end (a thread waiting
// for the other's last run). One call over the weights end to end pays
// those once (ops/f16w_matmul.cpp). Each output is summed exactly as its
// own node sums it, so the pass changes no bit.
//
// Preconditions: F16wMatMul nodes with one weight each, no transB, reading
// the same x. The group takes the place of the first of them in node order;
// the others only read x and constants, so every reader of their outputs
// still comes after the group.
#include <algorithm>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct SiblingGroup {
  std::vector<int> nodes;  // node order; the first is the anchor
};

bool single_weight_f16w(const Node& n) {
  return n.domain == kOneBitDomain && n.op_type == "F16wMatMul" && n.inputs.size() == 2 && n.outputs.size() == 1 &&
         n.attrs.get_int("transB", 0) == 0;
}

Match<SiblingGroup> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (!single_weight_f16w(n) || n.inputs[0] < 0) return {};
  SiblingGroup grp;
  for (int r : scan.readers[static_cast<size_t>(n.inputs[0])])
    if (single_weight_f16w(g.node(r)) && std::find(grp.nodes.begin(), grp.nodes.end(), r) == grp.nodes.end())
      grp.nodes.push_back(r);
  std::sort(grp.nodes.begin(), grp.nodes.end());
  // The group is found once, from its first node.
  if (grp.nodes.size() < 2 || grp.nodes[0] != node) return {};
  return grp;
}

}  // namespace

void group_sibling_matmuls(Graph& g, PassContext& ctx) {
  Fusion<SiblingGroup> f;
  f.name = "siblings";
  f.match = match;
  f.apply = [](Graph& g, const SiblingGroup& m, std::vector<bool>& drop, std::map<std::string, int64_t>& counts) {
    Node& anchor = g.node(m.nodes[0]);
    for (size_t i = 1; i < m.nodes.size(); ++i) {
      const Node& sib = g.node(m.nodes[i]);
      anchor.inputs.push_back(sib.inputs[1]);
      anchor.outputs.push_back(sib.outputs[0]);
      drop[static_cast<size_t>(m.nodes[i])] = true;
    }
    counts["f16w_gemms"] += static_cast<int64_t>(m.nodes.size());
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
