// Constant folding at load: Constant nodes become values, and a node whose
// inputs are all constant is run once and replaced by its outputs.
//
// Not folded: nodes whose outputs reach no graph output (a Transpose whose
// MatMul now packs the weight itself would otherwise copy a 600 MB table only
// to be dropped by remove-dead-nodes); Quantize/DequantizeLinear (the QDQ and q4 fusions need to see
// the integer weights; folding would materialize the float tensors they
// exist to avoid), and nodes whose outputs would dwarf their inputs
// (Expand, Tile, ConstantOfShape of large shapes), which stay cheaper to
// compute than to keep.
#include <deque>

#include "base/error.h"
#include "graph/evaluate.h"
#include "graph/passes/passes.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

constexpr size_t kMinFoldLimit = size_t{1} << 20;

bool never_fold(const Node& n) {
  return n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear" || n.op_type == "DynamicQuantizeLinear";
}

}  // namespace

void fold_constants(Graph& g, PassContext& ctx) {
  const OpRegistry& registry = ctx.registry;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  int64_t folded = 0;
  const std::vector<bool> live = live_nodes(g);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    bool all_constant = !never_fold(node) && live[n];
    size_t in_bytes = 0;
    for (int v : node.inputs) {
      if (v < 0) continue;
      const Value& val = g.value(v);
      if (!val.constant) all_constant = false;
      else in_bytes += val.constant->bytes();
    }
    const OpEntry* entry = all_constant ? registry.find(node.domain, node.op_type, node.opset) : nullptr;
    // Graph outputs stay produced by a node so the graph keeps its interface.
    for (int o : node.outputs)
      if (o >= 0 && g.value(o).is_output) entry = nullptr;
    if (!entry) {
      kept.push_back(std::move(node));
      continue;
    }
    KernelInfo info(g, node, &ctx.pool, ctx.options.kernel);
    // Planned before anything is made: an output that would dwarf its
    // inputs (ConstantOfShape, Expand, Tile of large shapes) stays a node,
    // computed at run time under the memory budget, instead of being
    // materialized here.
    std::vector<Tensor> outs;
    const bool fold = with_context(g.node_label(node), [&] {
      auto kernel = entry->create(info);
      std::vector<const Tensor*> ins(node.inputs.size(), nullptr);
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (node.inputs[i] >= 0) ins[i] = &*g.value(node.inputs[i]).constant;
      if (output_bytes(g, node, *kernel, ins) > std::max(kMinFoldLimit, 4 * in_bytes)) return false;
      outs = evaluate_node(g, node, *kernel, ins, ctx.pool);
      return true;
    });
    if (!fold) {
      kept.push_back(std::move(node));
      continue;
    }
    for (size_t o = 0; o < outs.size(); ++o) {
      if (node.outputs[o] < 0) continue;
      Value& v = g.value(node.outputs[o]);
      v.dtype = outs[o].dtype();
      v.constant = std::move(outs[o]);
      v.producer = -1;
    }
    ++folded;
  }
  g.nodes = std::move(kept);
  g.relink();
  ctx.report.count("folded_nodes", folded);
}

}  // namespace onebit
