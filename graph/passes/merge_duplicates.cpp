// Duplicate nodes merged (common subexpressions): a node that computes what
// an earlier node computes — the same op, domain, opset and attributes,
// reading the same values — is dropped, and its readers read the earlier
// node's outputs instead. Exports repeat such work: torch.onnx at opset 23
// computes the rotary Cos and Sin again for each RotaryEmbedding, four nodes
// a layer where two serve the whole model.
//
// It runs after the fusions, so they match the graph as exported (a fusion
// swallows only values with one reader, and a merge adds readers), and it
// merges ai.onnx nodes only: a fused node may hold packed weights or a KV
// state of its own, a contrib op (GroupQueryAttention) a cache. Never merged:
// nodes whose result is not a function of their inputs (the random ops),
// nodes with a subgraph or an attribute kind the loader does not keep, and a
// node one of whose outputs is a graph output.
//
// Two small constants of one dtype, shape and bytes count as the same input
// (the TorchScript exporter writes each layer's mask Where with Constants
// of its own for 0 and -inf); the kept node reads its own.
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <set>

#include "graph/passes/fusion.h"
#include "graph/passes/passes.h"

namespace onebit {
namespace {

bool is_random(const std::string& op) {
  static const std::set<std::string> ops = {"RandomNormal",     "RandomNormalLike", "RandomUniform",
                                            "RandomUniformLike", "Multinomial",      "Bernoulli",
                                            "Dropout"};
  return ops.count(op) != 0;
}

bool mergeable(const Graph& g, const Node& n) {
  if (!n.domain.empty() || is_random(n.op_type)) return false;
  bool any_output = false;
  for (int o : n.outputs) {
    if (o < 0) continue;
    if (g.value(o).is_output) return false;
    any_output = true;
  }
  if (!any_output) return false;
  for (const auto& [name, a] : n.attrs.all())
    if (a.kind == Attribute::Kind::Graph || a.kind == Attribute::Kind::Other) return false;
  return true;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }

// Bit for bit, so a NaN attribute equals itself and -0 is not +0.
bool same_attribute(const Attribute& a, const Attribute& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Attribute::Kind::Float: return same_bits(&a.f, &b.f, sizeof a.f);
    case Attribute::Kind::Int: return a.i == b.i;
    case Attribute::Kind::String: return a.s == b.s;
    case Attribute::Kind::Floats:
      return a.floats.size() == b.floats.size() &&
             same_bits(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float));
    case Attribute::Kind::Ints: return a.ints == b.ints;
    case Attribute::Kind::Strings: return a.strings == b.strings;
    case Attribute::Kind::Tensor:
      return a.t.dtype() == b.t.dtype() && a.t.shape() == b.t.shape() && a.t.bytes() == b.t.bytes() &&
             (a.t.bytes() == 0 || (a.t.raw() && b.t.raw() && same_bits(a.t.raw(), b.t.raw(), a.t.bytes())));
    case Attribute::Kind::Graph:
    case Attribute::Kind::Other: return false;
  }
  return false;
}

// Per value: the first small constant with the same dtype, shape and
// bytes, else the value itself.
constexpr size_t kSameConstantBytes = 256;
std::vector<int> same_constants(const Graph& g) {
  std::vector<int> canon(g.values.size());
  std::map<std::string, int> first;
  for (size_t v = 0; v < g.values.size(); ++v) {
    canon[v] = static_cast<int>(v);
    const Value& val = g.values[v];
    if (!val.constant || !val.constant->raw() || val.constant->bytes() > kSameConstantBytes) continue;
    const Tensor& t = *val.constant;
    std::string key = fmt::format("{}|{}|", static_cast<int>(t.dtype()), shape_str(t.shape()));
    key.append(static_cast<const char*>(t.raw()), t.bytes());
    canon[v] = first.emplace(std::move(key), static_cast<int>(v)).first->second;
  }
  return canon;
}

int canonical(const std::vector<int>& canon, int v) { return v < 0 ? v : canon[static_cast<size_t>(v)]; }

// Inputs already rewritten to the values they merged into.
bool same_node(const Node& a, const Node& b, const std::vector<int>& canon) {
  if (a.op_type != b.op_type || a.domain != b.domain || a.opset != b.opset || a.inputs.size() != b.inputs.size() ||
      a.outputs.size() != b.outputs.size())
    return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (canonical(canon, a.inputs[i]) != canonical(canon, b.inputs[i])) return false;
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if ((a.outputs[i] < 0) != (b.outputs[i] < 0)) return false;
  const auto& x = a.attrs.all();
  const auto& y = b.attrs.all();
  if (x.size() != y.size()) return false;
  for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j)
    if (i->first != j->first || !same_attribute(i->second, j->second)) return false;
  return true;
}

// What two same nodes share, to find the candidates; same_node decides.
std::string node_key(const Node& n, const std::vector<int>& canon) {
  std::string key = fmt::format("{}|{}|{}|", n.op_type, n.opset, n.attrs.all().size());
  for (int v : n.inputs) key += fmt::format("{},", canonical(canon, v));
  key += '|';
  for (int o : n.outputs) key += o < 0 ? '-' : '+';
  return key;
}

}  // namespace

void merge_duplicate_nodes(Graph& g, PassContext& ctx) {
  std::vector<int> merged_into(g.values.size(), -1);
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<std::string, std::vector<int>> seen;
  const std::vector<int> canon = same_constants(g);
  int64_t merged = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    for (int& v : node.inputs)
      if (v >= 0 && merged_into[static_cast<size_t>(v)] >= 0) v = merged_into[static_cast<size_t>(v)];
    if (!mergeable(g, node)) continue;
    std::vector<int>& candidates = seen[node_key(node, canon)];
    int same = -1;
    for (int c : candidates)
      if (same_node(g.nodes[static_cast<size_t>(c)], node, canon)) {
        same = c;
        break;
      }
    if (same < 0) {
      candidates.push_back(static_cast<int>(n));
      continue;
    }
    const Node& kept = g.nodes[static_cast<size_t>(same)];
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] >= 0) merged_into[static_cast<size_t>(node.outputs[i])] = kept.outputs[i];
    drop[n] = true;
    ++merged;
  }
  if (merged == 0) return;
  drop_nodes(g, drop);
  ctx.report.count("duplicates_merged", merged);
}

}  // namespace onebit
