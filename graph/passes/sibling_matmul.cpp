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
// And for com.microsoft::MatMulNBits, 4-bit (onnxruntime's quantizer in
// transformers.js' q4 files, onnxruntime-genai's int4 builds): siblings of
// one K, block_size and accuracy_level, without g_idx, become one
// com.onebit::MatMulNBitsGroup (ops/q4_matmul.cpp) that reads each weight's
// B, scales, zero_points, g_idx (absent) and bias in five slots, N the list
// of their widths: the same GEMM calls as Q4MatMul's group.
//
// Preconditions: nodes of one kind with one weight each, reading the same
// x: F16wMatMul without transB, Q4MatMul with the same block_size, or
// MatMulNBits as above with every other input a constant (and no NPU route,
// which binds one weight per node). The group takes the place of the first
// of them in node order; the others only read x and constants, so every
// reader of their outputs still comes after the group.
#include <algorithm>
#include <utility>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

enum class Kind { kNone, kF16w, kQ4, kNBits };

// More would not pay more: a layer has three siblings at most.
constexpr size_t kMaxSiblings = 8;

struct SiblingGroup {
  Kind kind = Kind::kNone;
  std::vector<int> nodes;  // node order; the first is the anchor
};

// Q4MatMul inputs per weight: W, scale, zero point, bias (-1 when absent).
constexpr size_t kQ4Slots = 4;
// MatMulNBits inputs per weight: B, scales, zero_points, g_idx, bias.
constexpr size_t kNBitsSlots = 5;

// What a node may be grouped as, and the attributes its siblings must share.
struct Key {
  Kind kind = Kind::kNone;
  int64_t block_size = 0, k = 0, accuracy_level = 0;
  bool operator==(const Key&) const = default;
};

// A 4-bit MatMulNBits whose weight inputs are constants and which has no g_idx.
bool groupable_nbits(const Graph& g, const Node& n) {
  if (n.domain != kMicrosoftDomain || n.op_type != "MatMulNBits" || n.outputs.size() != 1 || n.inputs.size() < 3 ||
      n.inputs.size() > 1 + kNBitsSlots || n.attrs.get_int("bits", 4) != 4 || input_at(n, 4) >= 0)
    return false;
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] >= 0 && !input_constant(g, n, i)) return false;
  return true;
}

Key kind_of(const Graph& g, const Node& n, bool npu) {
  if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] < 0) return {};
  if (!npu && groupable_nbits(g, n))
    return {Kind::kNBits, n.attrs.get_int("block_size", 0), n.attrs.get_int("K", 0),
            std::clamp<int64_t>(n.attrs.get_int("accuracy_level", 0), 0, 4)};
  if (n.domain != kOneBitDomain) return {};
  if (n.op_type == "F16wMatMul" && n.inputs.size() == 2 && n.attrs.get_int("transB", 0) == 0)
    return {Kind::kF16w};
  if (n.op_type == "Q4MatMul" && !npu && n.inputs.size() >= 3 && n.inputs.size() <= 1 + kQ4Slots)
    return {Kind::kQ4, n.attrs.get_int("block_size", 0)};
  return {};
}

Match<SiblingGroup> match(const FusionScan& scan, int node, bool npu) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  const Key kind = kind_of(g, n, npu);
  if (kind.kind == Kind::kNone) return {};
  SiblingGroup grp;
  grp.kind = kind.kind;
  for (int r : scan.readers[static_cast<size_t>(n.inputs[0])])
    if (kind_of(g, g.node(r), npu) == kind && std::find(grp.nodes.begin(), grp.nodes.end(), r) == grp.nodes.end())
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
    // Q4MatMul: each weight's inputs in four slots; MatMulNBits: in five.
    const size_t slots = m.kind == Kind::kQ4 ? kQ4Slots : m.kind == Kind::kNBits ? kNBitsSlots : 1;
    anchor.inputs.resize(1 + slots, -1);
    for (size_t i = 1; i < m.nodes.size(); ++i) {
      const Node& sib = g.node(m.nodes[i]);
      for (size_t s = 1; s <= slots; ++s) anchor.inputs.push_back(s < sib.inputs.size() ? sib.inputs[s] : -1);
      anchor.outputs.push_back(sib.outputs[0]);
      drop[static_cast<size_t>(m.nodes[i])] = true;
    }
    if (m.kind == Kind::kNBits) {  // the members' N, in order, as one ints attribute
      Attribute n;
      n.kind = Attribute::Kind::Ints;
      for (int member : m.nodes) n.ints.push_back(g.node(member).attrs.get_int("N", 0));
      make_onebit_node(anchor, "MatMulNBitsGroup", anchor.inputs);
      anchor.attrs.set("N", std::move(n));
    }
    counts[m.kind == Kind::kQ4 ? "q4_gemms" : m.kind == Kind::kNBits ? "nbits_gemms" : "f16w_gemms"] +=
        static_cast<int64_t>(m.nodes.size());
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
