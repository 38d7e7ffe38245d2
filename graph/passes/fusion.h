// The loop every fusion runs on, after ONNX Runtime's QDQ selector/action
// split: a fusion is a pure matcher (reads the graph, never mutates it) and a
// rewriter, and this file scans, collects refusals and reports them the same
// way for all of them:
//
//   for each node n:  match(scan, n) -> nothing | Refusal{why} | Group
//   then, for each group:  apply(g, group, drop, counts)
//                          (drop: nodes it swallowed; counts: extras such
//                          as with_q, reported as <name>_fused_<key>)
//   report  <name>_fused = groups, <name>_refused = refusals,
//           <name>_refused:<why> per reason; with SessionOptions::
//           debug_refusals (ONEBIT_QDQ_DEBUG=1) one stderr line per reason
//           `<name>_refused why=... count=...` and a summary line
//           `<name>_fused groups=N [key=count ...] refused=M`.
//
// Every match runs on the unmodified graph, so one group can never see
// another's rewrite; apply may change the anchor node in place, append
// values, and mark nodes to drop (removed, with producers relinked, at the
// end).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "graph/graph.h"
#include "graph/passes/passes.h"

namespace onebit {

// A candidate the fusion cannot take, and why (a short snake_case reason).
struct Refusal {
  std::string why;
};

// A matcher's answer for one node: not a candidate, refused, or a group.
template <class Group>
class Match {
 public:
  Match() = default;
  Match(Group g) : v_(std::move(g)) {}
  Match(Refusal r) : v_(std::move(r)) {}
  const Group* group() const { return std::get_if<Group>(&v_); }
  const Refusal* refusal() const { return std::get_if<Refusal>(&v_); }

 private:
  std::variant<std::monostate, Group, Refusal> v_;
};

// What matchers read: the graph and who reads each value, computed once.
struct FusionScan {
  const Graph& g;
  const std::vector<std::vector<int>>& readers;  // per value: reading nodes
};

// Whether `node` is the one reader of `value`, which is no graph output:
// a value a fusion swallows must be read nowhere else.
inline bool only_reader(const FusionScan& scan, int value, int node) {
  const auto& r = scan.readers[static_cast<size_t>(value)];
  return !scan.g.value(value).is_output && r.size() == 1 && r[0] == node;
}

template <class Group>
struct Fusion {
  std::string name;  // report prefix: "qdq" -> qdq_fused, qdq_refused
  std::function<Match<Group>(const FusionScan& scan, int node)> match;
  std::function<void(Graph& g, const Group& group, std::vector<bool>& drop, std::map<std::string, int64_t>& counts)>
      apply;
  // When false every group found is refused with `disabled_why` instead (the
  // control runs: ONEBIT_QDQ=0 and the like), so the count still says how
  // many would have fused.
  bool enabled = true;
  std::string disabled_why;
};

// Counts refusals and logs them under debug_refusals (shared with passes
// that are not node fusions: kv-state, last-position).
void report_refusals(const Graph& g, PassContext& ctx, const std::string& prefix,
                     const std::map<std::string, int64_t>& refused);

// Removes the nodes marked in `drop` and relinks producers.
void drop_nodes(Graph& g, const std::vector<bool>& drop);

// The groups `match` finds over every node, its refusals reported under
// `prefix`: for passes that insert nodes, which run_fusion's apply cannot.
template <class Group>
std::vector<Group> find_groups(Graph& g, PassContext& ctx, const std::string& prefix,
                               Match<Group> (*match)(const FusionScan&, int)) {
  const std::vector<std::vector<int>> readers = g.consumers();
  const FusionScan scan{g, readers};
  std::vector<Group> found;
  std::map<std::string, int64_t> refused;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Match<Group> m = match(scan, static_cast<int>(n));
    if (const Group* grp = m.group()) found.push_back(*grp);
    else if (const Refusal* r = m.refusal()) ++refused[r->why];
  }
  report_refusals(g, ctx, prefix, refused);
  return found;
}

// Runs `f` over every node of `g`; returns the number of groups rewritten.
template <class Group>
int64_t run_fusion(Graph& g, PassContext& ctx, const Fusion<Group>& f) {
  const std::vector<std::vector<int>> readers = g.consumers();
  const FusionScan scan{g, readers};
  std::map<std::string, int64_t> refused;
  std::vector<Group> groups;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Match<Group> m = f.match(scan, static_cast<int>(n));
    if (const Refusal* r = m.refusal()) ++refused[r->why];
    else if (const Group* grp = m.group()) {
      if (f.enabled) groups.push_back(*grp);
      else ++refused[f.disabled_why];
    }
  }
  std::vector<bool> drop(g.nodes.size(), false);
  std::map<std::string, int64_t> counts;
  for (const Group& grp : groups) f.apply(g, grp, drop, counts);
  if (!groups.empty()) drop_nodes(g, drop);
  ctx.report.count(f.name + "_fused", static_cast<int64_t>(groups.size()));
  std::string extras;
  for (const auto& [key, n] : counts) {
    ctx.report.count(f.name + "_fused_" + key, n);
    extras += fmt::format(" {}={}", key, n);
  }
  report_refusals(g, ctx, f.name, refused);
  if (ctx.options.debug_refusals)
    fmt::print(stderr, "{}: {}_fused groups={}{} refused={}\n", g.path, f.name, groups.size(), extras,
               ctx.report.get(f.name + "_refused"));
  return static_cast<int64_t>(groups.size());
}

}  // namespace onebit
