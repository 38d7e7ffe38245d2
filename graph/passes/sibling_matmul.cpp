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
// The same for com.onebit::Q4MatMul (ops/q4_matmul.cpp): the activations
// are quantized once for the group, and the weights' panels split in one
// call.
//
// Preconditions: nodes of one kind with one weight each, reading the same
// x: F16wMatMul without transB, or Q4MatMul with the same block_size (and
// no NPU route, which binds one weight per node). The group takes the place
// of the first of them in node order; the others only read x and
// constants, so every reader of their outputs still comes after the group.
#include <algorithm>
#include <utility>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

enum class Kind { kNone, kF16w, kQ4 };

// More would not pay more: a layer has three siblings at most.
constexpr size_t kMaxSiblings = 8;

struct SiblingGroup {
  Kind kind = Kind::kNone;
  std::vector<int> nodes;  // node order; the first is the anchor
};

// Q4MatMul inputs per weight: W, scale, zero point, bias (-1 when absent).
constexpr size_t kQ4Slots = 4;

// What a node may be grouped as, and the attribute its siblings must share.
std::pair<Kind, int64_t> kind_of(const Node& n, bool npu) {
  if (n.domain != kOneBitDomain || n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] < 0) return {};
  if (n.op_type == "F16wMatMul" && n.inputs.size() == 2 && n.attrs.get_int("transB", 0) == 0)
    return {Kind::kF16w, 0};
  if (n.op_type == "Q4MatMul" && !npu && n.inputs.size() >= 3 && n.inputs.size() <= 1 + kQ4Slots)
    return {Kind::kQ4, n.attrs.get_int("block_size", 0)};
  return {};
}

Match<SiblingGroup> match(const FusionScan& scan, int node, bool npu) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  const auto kind = kind_of(n, npu);
  if (kind.first == Kind::kNone) return {};
  SiblingGroup grp;
  grp.kind = kind.first;
  for (int r : scan.readers[static_cast<size_t>(n.inputs[0])])
    if (kind_of(g.node(r), npu) == kind && std::find(grp.nodes.begin(), grp.nodes.end(), r) == grp.nodes.end())
      grp.nodes.push_back(r);
  std::sort(grp.nodes.begin(), grp.nodes.end());
  // The group is found once, from its first node.
  if (grp.nodes.size() < 2 || grp.nodes[0] != node) return {};
  if (grp.nodes.size() > kMaxSiblings) grp.nodes.resize(kMaxSiblings);
  return grp;
}

}  // namespace

void group_sibling_matmuls(Graph& g, PassContext& ctx) {
  Fusion<SiblingGroup> f;
  f.name = "siblings";
  const bool npu = ctx.options.kernel.npu != nullptr;
  f.match = [npu](const FusionScan& scan, int node) { return match(scan, node, npu); };
  f.apply = [](Graph& g, const SiblingGroup& m, std::vector<bool>& drop, std::map<std::string, int64_t>& counts) {
    Node& anchor = g.node(m.nodes[0]);
    // Q4MatMul: each weight's inputs in four slots.
    if (m.kind == Kind::kQ4) anchor.inputs.resize(1 + kQ4Slots, -1);
    for (size_t i = 1; i < m.nodes.size(); ++i) {
      const Node& sib = g.node(m.nodes[i]);
      if (m.kind == Kind::kQ4) {
        for (size_t s = 1; s <= kQ4Slots; ++s) anchor.inputs.push_back(s < sib.inputs.size() ? sib.inputs[s] : -1);
      } else {
        anchor.inputs.push_back(sib.inputs[1]);
      }
      anchor.outputs.push_back(sib.outputs[0]);
      drop[static_cast<size_t>(m.nodes[i])] = true;
    }
    counts[m.kind == Kind::kQ4 ? "q4_gemms" : "f16w_gemms"] += static_cast<int64_t>(m.nodes.size());
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
