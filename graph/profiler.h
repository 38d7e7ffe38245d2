// Time per node while SessionOptions::profile is on, summed by op type into
// one table (`ONEBIT_PROFILE=1`; `bench` reports the prefill and the decode
// steps apart), with the time spent planning new shapes (plans built, and
// kept plans patched to new shapes) beside it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onebit {

class Kernel;

class Profiler {
 public:
  explicit Profiler(size_t nodes = 0) : node_ms_(nodes, 0.0) {}

  void add_node(size_t n, double ms) {
    node_ms_[n] += ms;
    node_total_ms_ += ms;
  }
  void add_plan(double ms) {
    plan_ms_ += ms;
    ++plans_;
  }
  // A kept plan moved to new shapes (Planner::patch): `ms` in all, of which
  // the folds it evaluated again were added to their nodes (add_node);
  // `reshaped` nodes, `refolded` folds, `regrown` as the patch before
  // (Plan::Growth: reshaping only the nodes it checks).
  void add_patch(double ms, int64_t reshaped, int64_t refolded, bool regrown) {
    patch_ms_ += ms;
    ++patches_;
    patch_nodes_ += reshaped;
    patch_folds_ += refolded;
    regrown_ += regrown;
    regrown_nodes_ += regrown ? reshaped : 0;
  }
  // The time add_node was given during the patch now being timed (the
  // session takes it out of the patch's).
  double node_ms() const { return node_total_ms_; }
  void add_run() { ++runs_; }
  void reset();

  // The table: total, then per op type its time, share, node count and the
  // costliest node with its kernel's describe().
  std::string report(const Graph& g, const std::vector<std::unique_ptr<Kernel>>& kernels) const;

 private:
  std::vector<double> node_ms_;  // per node
  int64_t runs_ = 0;             // runs node_ms_ covers
  int64_t plans_ = 0;            // plans built meanwhile
  double plan_ms_ = 0;           // time building them
  int64_t patches_ = 0;          // plans patched meanwhile
  double patch_ms_ = 0;          // time patching them
  int64_t patch_nodes_ = 0;      // nodes they reshaped (folds among them) or passed through
  int64_t patch_folds_ = 0;      // folds they evaluated again (timed as those nodes' runs)
  int64_t regrown_ = 0;          // patches that repeated the growth before (Plan::Growth)
  int64_t regrown_nodes_ = 0;    // nodes those reshaped (the ones a repeat checks)
  double node_total_ms_ = 0;     // all add_node was given
};

}  // namespace onebit
