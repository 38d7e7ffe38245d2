// The executor: a loaded graph made runnable. It applies the passes, creates
// one kernel per node (releasing constants the kernels packed), keeps a plan
// per input-shape signature (graph/planner.h) and runs it. A steady run whose
// shapes were seen before allocates nothing but its graph outputs, and those
// come from a pool (graph/output_pool.h).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/output_pool.h"
#include "graph/passes/passes.h"
#include "graph/profiler.h"
#include "graph/session_options.h"
#include "graph/tensor.h"

namespace onebit {

class Kernel;
class OpRegistry;
class Planner;
class ThreadPool;
struct Plan;

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

class Session {
 public:
  // Applies the passes of `options` and creates every kernel from
  // `registry` (ops/register_ops.h: default_op_registry()), which must
  // outlive the session. Every op without a kernel is listed in one error.
  Session(Graph graph, const OpRegistry& registry, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Graph& graph() const { return graph_; }
  // Node n's kernel (null for a node without one: none after construction).
  const Kernel* kernel(size_t n) const { return n < kernels_.size() ? kernels_[n].get() : nullptr; }
  const PassReport& pass_report() const { return report_; }
  const SessionOptions& options() const { return options_; }
  // Whether the session keeps the KV cache itself (the kv-state pass rewrote
  // the cache Concats; `present` is gone and `past` only carries its length).
  bool keeps_kv_state() const { return report_.get("kv_state") > 0; }
  ThreadPool& pool() { return *pool_; }

  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;

  // Runs the graph. Inputs are checked against the declared dtypes and dims
  // (symbolic dims must agree across inputs). Outputs come back in graph
  // output order, each owning its storage.
  std::vector<Tensor> run(const std::vector<NamedTensor>& inputs);

  // Sizes the arena and the graph-output buffers for inputs of these shapes
  // (data may be null), so later runs no larger than them allocate nothing,
  // and keeps the plan: runs of smaller shapes are patched from it rather
  // than planned (SessionOptions::patch_plans). A decode loop reserves for
  // its last step before its first.
  void reserve(const std::vector<NamedTensor>& inputs);

  // The dtype and shape of every value for inputs of these shapes (data may
  // be null), as a plan would have them; unknown until run time: empty.
  std::vector<Shape> value_shapes(const std::vector<NamedTensor>& inputs);

  // Counters for tests and traces.
  struct Stats {
    int64_t runs = 0;
    int64_t nodes_run = 0;  // kernels run by the last run (folded nodes excluded)
    int64_t plans_built = 0;
    int64_t plans_patched = 0;  // runs whose plan was a kept one moved to their shapes (Planner::patch)
    int64_t plans_regrown = 0;  // of those, plans grown as the patch before without reshaping (Plan::Growth)
    int64_t nodes_patched = 0;  // nodes those patches reshaped or passed through (Plan::patched_nodes), in all
    int64_t arena_allocations = 0;   // times the arena had to grow
    int64_t output_allocations = 0;  // graph-output buffers that could not be recycled
    size_t arena_bytes = 0;       // arena capacity
    size_t planned_bytes = 0;     // what the last run's plan needs of it
    uint64_t released_bytes = 0;  // constants released after packing
  };
  const Stats& stats() const { return stats_; }

  // With SessionOptions::profile: time spent per op type (and the kernel's
  // describe() of its costliest node) since the session began, as a table.
  std::string profile_report() const;
  // Starts the profile afresh (e.g. between a prefill and its decode steps).
  void reset_profile();

 private:
  // The plan these inputs take: one kept for the same shapes, else a kept
  // one patched to them (Planner::patch), else a new one.
  const Plan& plan_for(const std::vector<const Tensor*>& inputs);
  std::vector<const Tensor*> bind_inputs(const std::vector<NamedTensor>& inputs) const;
  void ensure_arena(size_t bytes);
  // Drops a constant every reader has packed a copy of (returning its file
  // pages to the kernel), keeping its dtype and shape for planning.
  void release_constant(Value& val);
  void create_kernels(const OpRegistry& registry);
  // Where a static node's outputs (out_ids, outs.size() of them) live this run.
  void bind_outputs(const Plan& p, const int* out_ids, const std::vector<const Tensor*>& at, uint8_t* arena,
                    std::vector<Tensor>& outs);

  Graph graph_;
  SessionOptions options_;
  PassReport report_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<Kernel>> kernels_;  // per node
  std::unique_ptr<Planner> planner_;
  struct KeptPlan {
    std::vector<Shape> shapes;  // the input shapes it is planned for now
    std::vector<Shape> built;   // those it was built for: its slots hold them
    std::unique_ptr<Plan> plan;
  };
  // Keeps a plan just built for `shapes` (most recent first, kPlansKept at most).
  const Plan& keep_plan(std::vector<Shape> shapes, std::unique_ptr<Plan> plan);
  std::list<KeptPlan> plans_;  // most recent first
  std::shared_ptr<void> arena_;
  size_t arena_size_ = 0;
  Stats stats_;
  std::unique_ptr<OutputPool> outputs_;
  std::vector<size_t> output_slot_;  // value id -> graph output index
  Profiler profiler_;
  // A run's values, kept between runs so a decode step allocates neither:
  // made_[v] what a node produced (emptied when the run ends, so no buffer
  // stays held, their shapes' storage kept for the next run's outputs),
  // at_[v] where value v is (made_, an input, a constant or a value the plan
  // knows; constants and known values are not copied); ins_ and outs_ the
  // node being run's inputs and outputs.
  std::vector<Tensor> made_;
  std::vector<const Tensor*> at_;
  // Every node's input ids and then its output ids, node after node in one
  // array (node n's inputs from io_at_[2n], its outputs from io_at_[2n+1]
  // to io_at_[2n+2]): the run loop reads them in order from here rather
  // than from each node's two lists, scattered over the heap.
  std::vector<int> io_;
  std::vector<size_t> io_at_;
  std::vector<const Tensor*> ins_;
  std::vector<Tensor> outs_;
};

}  // namespace onebit
