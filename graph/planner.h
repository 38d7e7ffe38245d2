// Planning one input-shape signature: the order is the graph's (topological
// since validation); per node, whether it folds now, runs with shapes known
// in advance, or must be planned when it runs; per value its dtype and shape,
// its slot in one arena (reused by lifetime) or the storage it views; and the
// in-place placements that let a Concat's inputs be written straight into
// its output. The executor (graph/session.cpp) runs what this decides. A
// plan can also be patched to other input shapes that fit in its slots,
// reshaping only the nodes the change reaches (a decode step's past length
// reaches the KV appends, the attention products and the folds of the mask
// and position: ~130 of the Qwen3-0.6B shape's ~1100 nodes); and a steady
// decode step, which grows its inputs as the step before did, repeats that
// patch without reshaping anything (Plan::Growth).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/kernel.h"
#include "graph/tensor.h"

namespace onebit {

class Kernel;
class Profiler;
class ThreadPool;

struct NodePlan {
  // Folded: run while planning (all inputs known, small outputs).
  // Static: shapes known; outputs in the arena or graph-output buffers.
  // Dynamic: planned when it runs (shapes depend on run-time data).
  // Elided: a Concat whose inputs were written into its output in place.
  enum class Mode : uint8_t { Folded, Static, Dynamic, Elided };
  Mode mode = Mode::Static;
  int64_t workspace_at = -1;  // arena offset of its workspace, -1 none
  size_t workspace_bytes = 0; // reserved there
  uint64_t reads_data = ~uint64_t{0};  // inputs whose values its reshape asked for (ReshapeContext::data_read)
  bool holds = false;         // a static node with an output its kernel keeps (ValuePlan::held)
};

struct ValuePlan {
  // What the executor reads to bind each output first, then the planner's
  // own fields: a bind touches one or two cache lines of the plan.
  DType dtype = DType::Undefined;  // static and known values
  bool held = false;               // storage its kernel keeps (ReshapeContext::hold_output)
  bool dynamic = false;            // shape known only at run time
  int alias_of = -1;               // value whose storage it views, -1 none
  int placed_in = -1;              // graph output whose buffer holds it, -1 none
  int64_t offset = -1;             // arena offset, -1 none
  int64_t alias_offset = 0;        // byte offset of the view in that storage
  int64_t placed_offset = 0;       // byte offset inside that output

  // The shape, and a copy of its dims inline with its element count (-1:
  // not a valid shape): what the executor binds each output from, read with
  // the fields above instead of behind a pointer of its own (a cache miss
  // per output a decode step, after the weights went by).
  const Shape& shape() const { return shape_; }
  void set_shape(const Shape& shape) {
    shape_ = shape;
    rank_ = static_cast<uint32_t>(shape.size());
    for (size_t i = 0; i < shape.size() && i < kInlineRank; ++i) inline_[i] = shape[i];
    count_ = checked_numel(shape);
  }
  const int64_t* dims() const { return rank_ <= kInlineRank ? inline_ : shape_.data(); }
  // Each dim moved by sign · delta[d] (a plan grown as the step before:
  // Plan::Growth); the count is -1 when that leaves no valid shape.
  void grow(const int64_t* delta, int64_t sign) {  // rank() deltas
    for (size_t d = 0; d < rank_; ++d) {
      shape_[d] += sign * delta[d];
      if (d < kInlineRank) inline_[d] = shape_[d];
    }
    count_ = checked_numel(shape_);
  }
  size_t rank() const { return rank_; }
  int64_t count() const { return count_; }

 private:
  static constexpr size_t kInlineRank = 6;
  uint32_t rank_ = 0;
  int64_t count_ = 1;  // the empty shape's (a scalar)
  int64_t inline_[kInlineRank] = {};
  Shape shape_;

 public:
  const Tensor* known = nullptr;  // constant or folded at plan time
  int64_t folded_at = -1;         // `known` is Plan::folded[folded_at], folded by this plan
  size_t slot_bytes = 0;          // arena bytes reserved at `offset` (what the plan was built for)
};

struct Plan {
  std::vector<NodePlan> nodes;    // per node
  std::vector<ValuePlan> values;  // per value
  std::deque<Tensor> folded;      // storage for values folded at plan time
  std::vector<int> early_outputs;  // graph outputs allocated before the first node runs
  // Every value a run reads where it already is: known to the plan (a
  // constant, or folded) or a released constant (shape only). A run points
  // at these from this list, not by visiting every value's plan.
  std::vector<std::pair<int, const Tensor*>> fixed;
  size_t arena_bytes = 0;
  // Planner::patch may move it to other input shapes (no Concat placed
  // into a graph output: those offsets follow the shapes).
  bool patchable = true;
  int64_t patched_nodes = 0;   // nodes the last patch reshaped (folded again or not), or passed through (dynamic)
  int64_t refolded_nodes = 0;  // folds the last patch evaluated again
  bool regrown = false;        // the last patch repeated the growth before it (Growth): only its checked nodes reshaped

  // The last patch, kept so the next may repeat it: a steady decode step
  // grows each input by what the step before grew it (the past by one).
  // The repeat grows the outputs of the nodes that patch reached by the
  // same deltas. A static node that follows growth (Kernel::follows_growth:
  // its outputs' dims are its inputs' plus constants) and views no input is
  // not reshaped: by induction in graph order its outputs grow exactly as a
  // reshape would give them. The others are checked: each fold reached is
  // evaluated again, each other static node (a view, or one whose shapes
  // follow its inputs' values: the mask chains transformers 4.x exports
  // build from attention_mask) reshaped again. One whose outputs do not
  // grow by their deltas, whose view or workspace moves, or a fold whose
  // data changes where it did not (or not where it did), would reach other
  // nodes: the plan is then put back as it was and patched node by node.
  struct Growth {
    bool valid = false;
    struct Step {
      int node;
      bool fold;
      bool reshape;                // a static node reshaped again and checked (not fold, not following growth)
      uint32_t values_at, values;  // its present outputs: `values` of them from values[values_at]
    };
    std::vector<int64_t> inputs;   // per graph input, per dim: its delta
    std::vector<Step> steps;       // the static nodes and folds it reached, in graph order
    std::vector<int> values;       // their present outputs
    std::vector<int64_t> dims;     // per step, per present output, per dim: its delta
    std::vector<uint8_t> changed;  // per fold, per present output: its data changed
    std::vector<Tensor> undo;      // a repeat's replaced folds, until it is known to hold
  };
  Growth growth;

  NodePlan& node(int n) { return nodes[static_cast<size_t>(n)]; }
  const NodePlan& node(int n) const { return nodes[static_cast<size_t>(n)]; }
  ValuePlan& value(int v) { return values[static_cast<size_t>(v)]; }
  const ValuePlan& value(int v) const { return values[static_cast<size_t>(v)]; }
  size_t bytes(int v) const;  // dtype size × elements of value v
};

class Planner {
 public:
  // `kernels` has one kernel per node of `g`; both outlive the planner.
  Planner(const Graph& g, const std::vector<std::unique_ptr<Kernel>>& kernels, ThreadPool& pool);

  // The plan for graph inputs of these dtypes and shapes (in graph-input
  // order; their data is not read). Errors name the node.
  std::unique_ptr<Plan> build(const std::vector<const Tensor*>& inputs) const;

  // Moves `p` to inputs of other shapes without planning it again: only the
  // nodes an input change reaches (a shape, or data folded at plan time) are
  // reshaped, and their outputs keep their arena slots; data folded anew
  // with the same shape reaches only the nodes that fold it or whose reshape
  // asked for it (NodePlan::reads_data; the others read it when they run).
  // A steady decode step differs from the one before only in the past
  // length, which reaches the KV appends, the attention products and the
  // folds of mask and position. Returns false, with `p` unusable, when the
  // plan cannot take the shapes: a value or workspace outgrowing its slot, a
  // node whose mode (folded, static, dynamic), dtype, view or held state
  // would change; the caller builds a new plan then. A kernel that refuses
  // the shapes throws, leaving `p` unusable too. A plan built for the
  // largest shapes (Session::reserve, for the last decode step) takes every
  // smaller step this way.
  bool patch(Plan& p, const std::vector<const Tensor*>& inputs) const;

  // With a profiler, a patch times each fold it evaluates again as that
  // node's run (the mask and positions of a decode step are computed there).
  void set_profiler(Profiler* profiler) { profiler_ = profiler; }
  // Off: a patch never repeats the growth before it (Plan::Growth); control runs.
  void set_regrow(bool on) { regrow_ = on; }

  // Per value: the last node reading it (kNever for graph outputs, -1 unread).
  static constexpr int kNever = 0x7fffffff;
  int last_use(int v) const { return last_use_[static_cast<size_t>(v)]; }
  // Per value: the nodes reading it, in graph order, each once, with the
  // input slots it is read at (bit i: input i; bit 63: input 63 or later).
  struct Reader {
    int node;
    uint64_t slots;
  };
  const Reader* readers_begin(int v) const { return readers_.data() + readers_at_[static_cast<size_t>(v)]; }
  const Reader* readers_end(int v) const { return readers_.data() + readers_at_[static_cast<size_t>(v) + 1]; }

 private:
  void place_concat_inputs(Plan& p) const;
  // Plan::Growth repeated for these inputs: false, with `p` as it was, when
  // they did not grow as the inputs of the patch before or the folds do not
  // follow. A fold that throws leaves `p` unusable.
  bool regrow(Plan& p, const std::vector<const Tensor*>& inputs) const;
  // Static node n reshaped again at a repeat (Plan::Growth::Step::reshape),
  // its inputs and outputs grown: true when the reshape gives the outputs
  // their grown shapes, their views and dtypes as they are, a workspace
  // within the node's and the same values read.
  bool reshaped_as_grown(const Plan& p, size_t n) const;
  // Node n evaluated again while patching, timed when profiling.
  std::vector<Tensor> refold(const Plan& p, size_t n) const;
  // The reshape of node n from the plan's current input dtypes, shapes and
  // known values: the planner's one context, valid until the next call (its
  // inputs point at the plan's shapes); null when it needs values the plan
  // lacks (NeedsValue).
  const ReshapeContext* reshape_node(const Plan& p, size_t n, bool& all_known) const;
  size_t output_bytes(const Node& node, size_t o, const OutputPlan& op) const;  // checked
  // Node n run while planning (every input it reads is known).
  std::vector<Tensor> fold(const Plan& p, size_t n) const;

  const Graph& g_;
  const std::vector<std::unique_ptr<Kernel>>& kernels_;
  ThreadPool& pool_;
  std::vector<int> last_use_;
  std::vector<int> readers_at_;  // per value, where its readers start in readers_ (one past the last value: the end)
  std::vector<Reader> readers_;
  // reshape_node's context, its storage kept from node to node (a decode
  // step's patch reshapes ~130 nodes; a planner serves one session's thread).
  mutable ReshapeContext scratch_;
  Profiler* profiler_ = nullptr;
  bool regrow_ = true;
};

}  // namespace onebit
