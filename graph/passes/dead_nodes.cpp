// Dead-node removal: a node none of whose outputs reaches a graph output is
// dropped, and constants no node reads any more are released.
#include "graph/passes/passes.h"

namespace onebit {

std::vector<bool> live_nodes(const Graph& g, std::vector<bool>* live_values) {
  std::vector<bool> live(g.values.size(), false);
  for (int v : g.outputs) live[static_cast<size_t>(v)] = true;
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t n = g.nodes.size(); n-- > 0;) {
    const Node& node = g.nodes[n];
    for (int o : node.outputs)
      if (o >= 0 && live[static_cast<size_t>(o)]) keep[n] = true;
    if (!keep[n]) continue;
    for (int v : node.inputs)
      if (v >= 0) live[static_cast<size_t>(v)] = true;
  }
  if (live_values) *live_values = std::move(live);
  return keep;
}

void remove_dead_nodes(Graph& g, PassContext& ctx) {
  std::vector<bool> live;
  const std::vector<bool> keep = live_nodes(g, &live);
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (keep[n]) nodes.push_back(std::move(g.nodes[n]));
  ctx.report.count("dead_nodes", static_cast<int64_t>(g.nodes.size() - nodes.size()));
  g.nodes = std::move(nodes);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (!live[v] && g.values[v].constant && !g.values[v].is_output) g.values[v].constant.reset();
  g.relink();
}

}  // namespace onebit
