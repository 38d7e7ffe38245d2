#include "graph/validate.h"

#include <queue>

#include "base/error.h"

namespace onebit {

namespace {

bool defined(const Value& v) { return v.constant || v.is_input || v.producer >= 0; }

// Walks producer links from a node left over by Kahn's algorithm until a node
// repeats; that loop is the cycle to report.
std::string describe_cycle(const Graph& g, const std::vector<int>& indegree) {
  int start = -1;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (indegree[n] > 0) {
      start = static_cast<int>(n);
      break;
    }
  std::vector<int> seen_at(g.nodes.size(), -1);
  std::vector<int> path;
  int n = start;
  while (n >= 0 && seen_at[static_cast<size_t>(n)] < 0) {
    seen_at[static_cast<size_t>(n)] = static_cast<int>(path.size());
    path.push_back(n);
    int next = -1;
    for (int v : g.node(n).inputs) {
      if (v < 0) continue;
      const int p = g.value(v).producer;
      if (p >= 0 && indegree[static_cast<size_t>(p)] > 0) {
        next = p;
        break;
      }
    }
    n = next;
  }
  std::string s;
  if (n < 0) return s;
  for (size_t i = static_cast<size_t>(seen_at[static_cast<size_t>(n)]); i < path.size(); ++i) {
    const Node& node = g.node(path[i]);
    s += fmt::format("'{}' ({}) <- ", node.name, node.op_type);
  }
  return s + fmt::format("'{}'", g.node(n).name);
}

}  // namespace

void validate(Graph& g) {
  g.relink();
  for (const Node& node : g.nodes)
    for (int v : node.inputs) {
      if (v < 0) continue;
      const Value& val = g.value(v);
      if (!defined(val))
        fail("{}: reads '{}', which no node, graph input or initializer defines", g.node_label(node), val.name);
    }
  for (int v : g.outputs)
    if (!defined(g.value(v)))
      fail("{}: graph output '{}' is not defined", g.path, g.value(v).name);

  // Kahn's algorithm; a min-heap on the file index keeps the order stable.
  const size_t n = g.nodes.size();
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<int>> users(n);
  for (size_t i = 0; i < n; ++i)
    for (int v : g.nodes[i].inputs) {
      if (v < 0) continue;
      const int p = g.value(v).producer;
      if (p < 0) continue;
      if (static_cast<size_t>(p) == i)
        fail("{}: reads its own output '{}' (a cycle)", g.node_label(g.nodes[i]), g.value(v).name);
      ++indegree[i];
      users[static_cast<size_t>(p)].push_back(static_cast<int>(i));
    }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)])
      if (--indegree[static_cast<size_t>(u)] == 0) ready.push(u);
  }
  if (order.size() != n) fail("{}: the graph has a cycle: {}", g.path, describe_cycle(g, indegree));

  bool sorted = true;
  for (size_t i = 0; i < n; ++i) sorted = sorted && order[i] == static_cast<int>(i);
  if (sorted) return;
  std::vector<Node> nodes;
  nodes.reserve(n);
  for (int i : order) nodes.push_back(std::move(g.node(i)));
  g.nodes = std::move(nodes);
  g.relink();
}

}  // namespace onebit
