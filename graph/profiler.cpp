#include "graph/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "graph/kernel.h"

namespace onebit {

void Profiler::reset() {
  std::fill(node_ms_.begin(), node_ms_.end(), 0.0);
  runs_ = plans_ = patches_ = patch_nodes_ = patch_folds_ = regrown_ = regrown_nodes_ = 0;
  plan_ms_ = patch_ms_ = node_total_ms_ = 0;
}

std::string Profiler::report(const Graph& g, const std::vector<std::unique_ptr<Kernel>>& kernels) const {
  struct Row {
    double ms = 0;
    int nodes = 0;
    size_t worst = 0;
  };
  std::map<std::string, Row> by_op;
  double total = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    Row& r = by_op[node.domain.empty() ? node.op_type : node.domain + "::" + node.op_type];
    if (r.nodes == 0 || node_ms_[n] > node_ms_[r.worst]) r.worst = n;
    r.ms += node_ms_[n];
    ++r.nodes;
    total += node_ms_[n];
  }
  std::vector<std::pair<std::string, Row>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string s = fmt::format(
      "profile: {:.1f} ms in kernels over {} runs, {:.1f} ms planning {} new shapes, {:.1f} ms patching {} plans to new "
      "shapes{}\n",
      total, runs_, plan_ms_, plans_, patch_ms_, patches_,
      patches_ > 0 ? fmt::format(" ({:.0f} nodes reshaped and {:.0f} folds evaluated again each, their time counted "
                                 "above; {} grown as the step before, {})",
                                 double(patch_nodes_) / double(patches_), double(patch_folds_) / double(patches_),
                                 regrown_,
                                 regrown_nodes_ == 0
                                     ? std::string("reshaping nothing")
                                     : fmt::format("reshaping {:.0f} nodes each", double(regrown_nodes_) /
                                                                                    double(regrown_)))
                   : std::string());
  for (const auto& [op, r] : rows) {
    if (r.ms <= 0) continue;
    s += fmt::format("  {:<28} {:>9.1f} ms {:>5.1f}%  {:>4} nodes  worst '{}' {}\n", op, r.ms, 100 * r.ms / total,
                     r.nodes, g.nodes[r.worst].name, kernels[r.worst] ? kernels[r.worst]->describe() : "");
  }
  return s;
}

}  // namespace onebit
