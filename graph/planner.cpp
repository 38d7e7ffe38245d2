#include "graph/planner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "base/error.h"
#include "graph/evaluate.h"
#include "graph/kernel.h"
#include "graph/memory_plan.h"
#include "graph/profiler.h"

namespace onebit {

namespace {

// Nodes whose outputs total at most this many bytes, with every input known,
// are evaluated while planning (shape subgraphs, masks, position tables).
constexpr size_t kPlanFoldBytes = size_t{16} << 20;

}  // namespace

size_t Plan::bytes(int v) const {
  const ValuePlan& vp = value(v);
  return dtype_bytes(vp.dtype, numel(vp.shape()));
}

Planner::Planner(const Graph& g, const std::vector<std::unique_ptr<Kernel>>& kernels, ThreadPool& pool)
    : g_(g), kernels_(kernels), pool_(pool), last_use_(g.values.size(), -1) {
  for (size_t n = 0; n < g_.nodes.size(); ++n)
    for (int v : g_.nodes[n].inputs)
      if (v >= 0) last_use_[static_cast<size_t>(v)] = static_cast<int>(n);
  for (int v : g_.outputs) last_use_[static_cast<size_t>(v)] = kNever;
  // Readers per value, from the graph's consumer lists (a node per input
  // slot, in graph order): one entry per (value, node), its slots the inputs
  // the node reads it at. A patch visits readers after their producers in
  // one pass, so the order must be topological (validation makes it so; a
  // pass must keep it).
  const std::vector<std::vector<int>> consumers = g_.consumers();
  readers_at_.assign(g_.values.size() + 1, 0);
  for (size_t v = 0; v < consumers.size(); ++v) {
    for (size_t c = 0; c < consumers[v].size(); ++c) {
      const int n = consumers[v][c];
      if (g_.values[v].producer >= n)
        fail("{}: reads '{}' before its producer runs (the node order is not topological)",
             g_.node_label(g_.nodes[static_cast<size_t>(n)]), g_.values[v].name);
      if (c > 0 && consumers[v][c - 1] == n) continue;  // the same node at another slot
      const std::vector<int>& in = g_.nodes[static_cast<size_t>(n)].inputs;
      uint64_t slots = 0;
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i] == static_cast<int>(v)) slots |= uint64_t{1} << (i < 63 ? i : 63);
      readers_.push_back(Reader{n, slots});
    }
    readers_at_[v + 1] = static_cast<int>(readers_.size());
  }
}

std::unique_ptr<Plan> Planner::build(const std::vector<const Tensor*>& inputs) const {
  const size_t nv = g_.values.size(), nn = g_.nodes.size();
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.nodes.assign(nn, NodePlan{});
  p.values.assign(nv, ValuePlan{});

  for (size_t v = 0; v < nv; ++v) {
    const Value& val = g_.values[v];
    if (!val.constant) continue;
    // A released constant (packed by its readers) keeps its dtype and
    // shape for planning but is no longer a value anyone may read.
    ValuePlan& vp = p.values[v];
    if (val.constant->raw() || val.constant->bytes() == 0) vp.known = &*val.constant;
    vp.dtype = val.constant->dtype();
    vp.set_shape(val.constant->shape());
  }
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    ValuePlan& vp = p.value(g_.inputs[i]);
    vp.dtype = inputs[i]->dtype();
    vp.set_shape(inputs[i]->shape());
  }

  MemoryPlanner arena;
  std::vector<int> refs(nv, 0);  // live views of each arena root
  auto root_of = [&](int v) {
    while (p.value(v).alias_of >= 0) v = p.value(v).alias_of;
    return v;
  };
  auto slot_bytes = [&](int v) { return std::max<size_t>(1, p.bytes(v)); };
  auto release = [&](int v) {
    const int r = root_of(v);
    if (p.value(r).offset >= 0 && --refs[static_cast<size_t>(r)] == 0)
      arena.release(static_cast<size_t>(p.value(r).offset), slot_bytes(r));
  };

  for (size_t n = 0; n < nn; ++n) {
    const Node& node = g_.nodes[n];
    NodePlan& np = p.nodes[n];
    bool any_dynamic = kernels_[n]->shape_depends_on_data();
    for (int v : node.inputs) any_dynamic = any_dynamic || (v >= 0 && p.value(v).dynamic);
    const ReshapeContext* rc = nullptr;
    bool all_known = true;
    if (any_dynamic || !(rc = reshape_node(p, n, all_known))) {
      np.mode = NodePlan::Mode::Dynamic;
      for (int o : node.outputs)
        if (o >= 0) p.value(o).dynamic = true;
      continue;
    }
    np.reads_data = rc->data_read();
    size_t out_bytes = 0;
    bool holds = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (node.outputs[o] < 0) continue;
      const OutputPlan& op = rc->outputs()[o];
      ValuePlan& vp = p.value(node.outputs[o]);
      vp.dtype = op.dtype;
      vp.set_shape(op.shape);
      out_bytes += output_bytes(node, o, op);
      holds = holds || op.held;
    }

    if (all_known && out_bytes <= kPlanFoldBytes && !holds) {
      std::vector<Tensor> outs = fold(p, n);
      for (size_t o = 0; o < outs.size(); ++o) {
        if (node.outputs[o] < 0) continue;
        ValuePlan& vp = p.value(node.outputs[o]);
        vp.folded_at = static_cast<int64_t>(p.folded.size());
        p.folded.push_back(std::move(outs[o]));
        vp.known = &p.folded.back();
      }
      np.mode = NodePlan::Mode::Folded;
      continue;
    }

    // Static: outputs get arena slots (graph outputs are allocated per run).
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (node.outputs[o] < 0) continue;
      const int v = node.outputs[o];
      const Value& val = g_.value(v);
      ValuePlan& vp = p.value(v);
      const OutputPlan& op = rc->outputs()[o];
      const bool unused = last_use(v) < 0;
      if (op.held) {  // a graph output too: the run hands out a copy (Session::run)
        vp.held = true;
        np.holds = true;
        continue;
      }
      if (val.is_output) continue;
      if (op.alias_of >= 0) {
        const int src = node.inputs[static_cast<size_t>(op.alias_of)];
        const int r = root_of(src);
        // Views of arena buffers only; a view of a constant or a graph input
        // just points at it (read-only use by later nodes).
        vp.alias_of = src;
        vp.alias_offset = op.alias_offset;
        if (p.value(r).offset >= 0) ++refs[static_cast<size_t>(r)];
        if (unused) release(v);
        continue;
      }
      vp.slot_bytes = slot_bytes(v);
      vp.offset = static_cast<int64_t>(arena.allocate(vp.slot_bytes));
      refs[static_cast<size_t>(v)] = 1;
      if (unused) release(v);
    }
    if (rc->workspace() > 0) {
      const size_t at = arena.allocate(rc->workspace());
      np.workspace_at = static_cast<int64_t>(at);
      np.workspace_bytes = rc->workspace();
      arena.release(at, rc->workspace());
    }
    for (int v : node.inputs)
      if (v >= 0 && last_use(v) == static_cast<int>(n) && !p.value(v).known) release(v);
  }
  place_concat_inputs(p);
  for (size_t v = 0; v < nv; ++v) {
    const ValuePlan& vp = p.values[v];
    if (vp.known) p.fixed.emplace_back(static_cast<int>(v), vp.known);
    else if (g_.values[v].constant) p.fixed.emplace_back(static_cast<int>(v), &*g_.values[v].constant);
  }
  p.patchable = p.early_outputs.empty();
  p.arena_bytes = arena.high_water();
  return plan;
}

const ReshapeContext* Planner::reshape_node(const Plan& p, size_t n, bool& all_known) const {
  const Node& node = g_.nodes[n];
  Kernel& kernel = *kernels_[n];
  all_known = true;
  ReshapeContext& rc = scratch_;
  rc.start(static_cast<int>(node.inputs.size()), static_cast<int>(node.outputs.size()));
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const int v = node.inputs[i];
    if (v < 0) continue;
    const ValuePlan& vp = p.value(v);
    InputInfo& in = rc.input_slot(static_cast<int>(i));
    in.present = true;
    in.dtype = vp.dtype;
    in.shape = &vp.shape();
    in.value = vp.known;
    if (!vp.known && kernel.needs_input_data(static_cast<int>(i))) all_known = false;
  }
  for (size_t o = 0; o < node.outputs.size(); ++o) rc.set_present(static_cast<int>(o), node.outputs[o] >= 0);
  try {
    with_context([&] { return g_.node_label(node); }, [&] { kernel.reshape(rc); });
  } catch (const NeedsValue&) {
    return nullptr;
  }
  for (size_t o = 0; o < node.outputs.size(); ++o)
    if (node.outputs[o] >= 0 && !rc.outputs()[o].set) fail("{}: kernel did not plan output {}", g_.node_label(node), o);
  return &rc;
}

size_t Planner::output_bytes(const Node& node, size_t o, const OutputPlan& op) const {
  const int64_t count = checked_numel(op.shape);
  if (count < 0) fail("{}: output {} has invalid shape {}", g_.node_label(node), o, shape_str(op.shape));
  return with_context([&] { return g_.node_label(node); }, [&] { return dtype_bytes(op.dtype, count); });
}

std::vector<Tensor> Planner::fold(const Plan& p, size_t n) const {
  const Node& node = g_.nodes[n];
  std::vector<const Tensor*> ins(node.inputs.size(), nullptr);
  std::deque<Tensor> shells;  // shape-only stand-ins for inputs whose data is not read
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const int v = node.inputs[i];
    if (v < 0) continue;
    const ValuePlan& vp = p.value(v);
    if (vp.known) {
      ins[i] = vp.known;
    } else {
      shells.emplace_back(vp.dtype, vp.shape(), nullptr);
      ins[i] = &shells.back();
    }
  }
  return with_context([&] { return g_.node_label(node); },
                      [&] { return evaluate_node(g_, node, *kernels_[n], ins, pool_); });
}

namespace {

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.bytes() == 0 || (a.raw() && b.raw() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0));
}

// The value a node's output views (its reshape named one of the node's
// inputs), or -1: what ValuePlan::alias_of must equal for a plan to keep it.
int viewed_value(const Node& node, const OutputPlan& op) {
  return op.alias_of >= 0 ? node.inputs[static_cast<size_t>(op.alias_of)] : -1;
}

}  // namespace

std::vector<Tensor> Planner::refold(const Plan& p, size_t n) const {
  if (!profiler_) return fold(p, n);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> outs = fold(p, n);
  profiler_->add_node(n, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return outs;
}

bool Planner::regrow(Plan& p, const std::vector<const Tensor*>& inputs) const {
  Plan::Growth& gr = p.growth;
  if (!gr.valid) return false;
  size_t at = 0;
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    const ValuePlan& vp = p.value(g_.inputs[i]);
    const Shape& to = inputs[i]->shape();
    if (vp.dtype != inputs[i]->dtype() || to.size() != vp.rank() || at + to.size() > gr.inputs.size()) return false;
    for (size_t d = 0; d < to.size(); ++d)
      if (to[d] != vp.dims()[d] + gr.inputs[at + d]) return false;
    at += to.size();
  }
  // The values it moves are scattered over the plan and their shapes over
  // the heap, and the weights have just gone by: ask for them all first
  // (the misses overlap), then move them.
  for (int v : gr.values) __builtin_prefetch(&p.value(v), 1);
  for (int v : gr.values) __builtin_prefetch(p.value(v).shape().data(), 1);
  // Moves the inputs and the first `done` steps' outputs by sign · their
  // deltas; going back (sign -1), puts back the folds gr.undo kept.
  auto move = [&](size_t done, int64_t sign) {
    const int64_t* delta = gr.inputs.data();
    for (int v : g_.inputs) {
      p.value(v).grow(delta, sign);
      delta += p.value(v).rank();
    }
    delta = gr.dims.data();
    size_t undo = 0;
    for (size_t k = 0; k < done; ++k) {
      const Plan::Growth::Step& st = gr.steps[k];
      for (uint32_t i = 0; i < st.values; ++i) {
        ValuePlan& vp = p.value(gr.values[st.values_at + i]);
        vp.grow(delta, sign);
        delta += vp.rank();
        if (sign < 0 && st.fold && vp.folded_at >= 0 && undo < gr.undo.size())
          p.folded[static_cast<size_t>(vp.folded_at)] = std::move(gr.undo[undo++]);
      }
    }
  };
  move(0, 1);
  gr.undo.clear();
  const int64_t* delta = gr.dims.data();
  size_t changed = 0, done = 0;
  int64_t folds = 0, reshaped = 0;
  bool holds = true;
  for (; done < gr.steps.size() && holds; ++done) {
    const Plan::Growth::Step& st = gr.steps[done];
    const int* values = gr.values.data() + st.values_at;
    for (uint32_t i = 0; i < st.values; ++i) {
      ValuePlan& vp = p.value(values[i]);
      vp.grow(delta, 1);
      delta += vp.rank();
      holds = holds && vp.count() >= 0 &&
              (vp.offset < 0 || std::max<size_t>(1, dtype_bytes(vp.dtype, vp.count())) <= vp.slot_bytes);
    }
    if (st.reshape) {
      ++reshaped;
      holds = holds && reshaped_as_grown(p, static_cast<size_t>(st.node));
      continue;
    }
    if (!st.fold) continue;
    ++folds;
    const size_t n = static_cast<size_t>(st.node);
    const Node& node = g_.nodes[n];
    std::vector<Tensor> outs = holds ? refold(p, n) : std::vector<Tensor>(node.outputs.size());
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int v = node.outputs[o];
      if (v < 0) continue;
      const ValuePlan& vp = p.value(v);
      if (vp.folded_at < 0 || changed >= gr.changed.size()) {  // never recorded so
        holds = false;
        continue;
      }
      Tensor& kept = p.folded[static_cast<size_t>(vp.folded_at)];
      holds = holds && outs[o].dtype() == vp.dtype && outs[o].shape() == vp.shape() &&
              !same_tensor(kept, outs[o]) == (gr.changed[changed] != 0);
      ++changed;
      gr.undo.push_back(std::move(kept));
      kept = std::move(outs[o]);
    }
  }
  if (!holds) {
    move(done, -1);
    gr.undo.clear();
    gr.valid = false;
    return false;
  }
  gr.undo.clear();
  p.patched_nodes = reshaped;
  p.refolded_nodes = folds;
  p.regrown = true;
  return true;
}

bool Planner::reshaped_as_grown(const Plan& p, size_t n) const {
  const Node& node = g_.nodes[n];
  const NodePlan& np = p.nodes[n];
  bool all_known = true;
  const ReshapeContext* rc = reshape_node(p, n, all_known);
  if (!rc || rc->data_read() != np.reads_data || rc->workspace() > np.workspace_bytes) return false;
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const int v = node.outputs[o];
    if (v < 0) continue;
    const OutputPlan& op = rc->outputs()[o];
    const ValuePlan& vp = p.value(v);
    if (op.dtype != vp.dtype || op.held != vp.held || op.shape != vp.shape()) return false;
    if (!op.held && !g_.value(v).is_output) {  // views as patch() has them
      const int src = viewed_value(node, op);
      if (src != vp.alias_of || (src >= 0 && op.alias_offset != vp.alias_offset)) return false;
    }
  }
  return true;
}

bool Planner::patch(Plan& p, const std::vector<const Tensor*>& inputs) const {
  if (!p.patchable) return false;
  if (regrow_ && regrow(p, inputs)) return true;
  p.regrown = false;
  p.refolded_nodes = 0;
  // What this patch does, kept for the next to repeat (Plan::Growth).
  Plan::Growth& rec = p.growth;
  rec.valid = false;
  rec.inputs.clear();
  rec.steps.clear();
  rec.values.clear();
  rec.dims.clear();
  rec.changed.clear();
  bool repeatable = true;
  // Appends to `deltas` how `vp` grows to `to` (per dim).
  auto record_delta = [&](std::vector<int64_t>& deltas, const ValuePlan& vp, const Shape& to) {
    if (to.size() != vp.rank()) {
      repeatable = false;
      return;
    }
    for (size_t d = 0; d < to.size(); ++d) deltas.push_back(to[d] - vp.dims()[d]);
  };
  // The nodes reading a value whose shape or folded data this patch changed
  // (due): only those are reshaped, the rest keep what they had. A value
  // whose data alone changed (a fold's new result, same shape) leaves due
  // only the readers that fold or whose reshape asked for its data: a
  // static node's reshape is a function of its inputs' shapes and the
  // values it asked for (ReshapeContext::data_read), and it reads the new
  // data when it runs. A node's readers come after it (graph order is
  // topological), so the nodes due are visited once each, in order, as the
  // walk marks them; no other node's inputs are read (a steady decode step
  // reaches ~130 of ~1100 nodes, and every node's input list is a cache
  // miss after the weights went by).
  std::vector<uint64_t> due((g_.nodes.size() + 63) / 64, 0);
  auto mark = [&](int v, bool data_only) {
    for (const Reader* r = readers_begin(v); r != readers_end(v); ++r) {
      if (data_only) {
        const NodePlan& rp = p.nodes[static_cast<size_t>(r->node)];
        if (rp.mode == NodePlan::Mode::Static && (rp.reads_data & r->slots) == 0) continue;
      }
      due[static_cast<size_t>(r->node) >> 6] |= uint64_t{1} << (r->node & 63);
    }
  };
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    ValuePlan& vp = p.value(g_.inputs[i]);
    if (vp.dtype != inputs[i]->dtype()) return false;
    record_delta(rec.inputs, vp, inputs[i]->shape());
    if (vp.shape() == inputs[i]->shape()) continue;
    vp.set_shape(inputs[i]->shape());
    mark(g_.inputs[i], false);
  }
  // Node n, one of its inputs changed: false when the plan cannot take it.
  auto patch_node = [&](size_t n) {
    const Node& node = g_.nodes[n];
    NodePlan& np = p.nodes[n];
    if (np.mode == NodePlan::Mode::Dynamic) {  // planned when it runs; what it feeds is dynamic too
      for (int o : node.outputs)
        if (o >= 0) mark(o, false);
      return true;
    }
    if (np.mode != NodePlan::Mode::Static && np.mode != NodePlan::Mode::Folded) return false;
    // A static node the repeat must reshape again: one that does not follow
    // growth (asked after this reshape: the answer may depend on the shapes)
    // or views an input (below).
    rec.steps.push_back({static_cast<int>(n), np.mode == NodePlan::Mode::Folded, false,
                         static_cast<uint32_t>(rec.values.size()), 0});
    bool all_known = true;
    const ReshapeContext* rc = reshape_node(p, n, all_known);
    if (!rc) return false;
    np.reads_data = rc->data_read();
    if (np.mode == NodePlan::Mode::Static && !kernels_[n]->follows_growth()) rec.steps.back().reshape = true;
    size_t out_bytes = 0;
    bool holds = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const int v = node.outputs[o];
      if (v < 0) continue;
      const OutputPlan& op = rc->outputs()[o];
      ValuePlan& vp = p.value(v);
      if (op.dtype != vp.dtype || op.held != vp.held) return false;
      const size_t bytes = output_bytes(node, o, op);
      bool moved = false;
      record_delta(rec.dims, vp, op.shape);
      rec.values.push_back(v);
      ++rec.steps.back().values;
      if (np.mode == NodePlan::Mode::Static && (vp.alias_of >= 0 || op.alias_of >= 0)) rec.steps.back().reshape = true;
      if (np.mode == NodePlan::Mode::Static && !op.held && !g_.value(v).is_output) {
        const int src = viewed_value(node, op);
        if (src != vp.alias_of) return false;
        if (src < 0 && std::max<size_t>(1, bytes) > vp.slot_bytes) return false;
        if (src >= 0 && vp.alias_offset != op.alias_offset) {
          vp.alias_offset = op.alias_offset;
          moved = true;
        }
      }
      out_bytes += bytes;
      holds = holds || op.held;
      if (vp.shape() != op.shape) {
        vp.set_shape(op.shape);
        moved = true;
      }
      if (moved) mark(v, false);
    }
    if (np.mode == NodePlan::Mode::Static) return rc->workspace() <= np.workspace_bytes;
    // Folded: evaluated again; new data reaches its readers.
    if (!all_known || out_bytes > kPlanFoldBytes || holds) return false;
    std::vector<Tensor> outs = refold(p, n);
    ++p.refolded_nodes;
    for (size_t o = 0; o < outs.size(); ++o) {
      const int v = node.outputs[o];
      if (v < 0) continue;
      ValuePlan& vp = p.value(v);
      if (vp.folded_at < 0) return false;
      Tensor& kept = p.folded[static_cast<size_t>(vp.folded_at)];
      const bool same = same_tensor(kept, outs[o]);
      rec.changed.push_back(same ? 0 : 1);
      if (same) continue;
      kept = std::move(outs[o]);
      mark(v, kept.shape() == vp.shape());
    }
    return true;
  };
  p.patched_nodes = 0;
  for (size_t word = 0; word < due.size(); ++word)
    while (due[word] != 0) {
      const size_t n = word * 64 + static_cast<size_t>(__builtin_ctzll(due[word]));
      due[word] &= due[word] - 1;  // what this node marks lies further on
      if (!patch_node(n)) return false;
      ++p.patched_nodes;
    }
  rec.valid = repeatable && !rec.steps.empty();
  return true;
}

// A Concat that writes a graph output, along an axis with only 1s before it
// (each input is one contiguous block of the output: the stacked `present`
// of a KV cache), whose inputs are each the whole of an arena value this
// plan produces: those values are placed inside the output buffer, so their
// producers write there directly and the Concat has nothing left to do. It
// saves a copy of the whole cache per decode step. The arena slots planned
// for them stay reserved but unused (never touched, so never resident).
void Planner::place_concat_inputs(Plan& p) const {
  auto root_of = [&](int v, int64_t& offset) {
    offset = 0;
    while (p.value(v).alias_of >= 0) {
      offset += p.value(v).alias_offset;
      v = p.value(v).alias_of;
    }
    return v;
  };
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& node = g_.nodes[n];
    const std::optional<int64_t> concat_axis = kernels_[n]->concat_axis();
    if (!concat_axis || p.nodes[n].mode != NodePlan::Mode::Static) continue;
    const int out = node.outputs.empty() ? -1 : node.outputs[0];
    if (out < 0 || !g_.value(out).is_output) continue;
    const Shape& shape = p.value(out).shape();
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t axis = *concat_axis < 0 ? *concat_axis + rank : *concat_axis;
    if (axis < 0 || axis >= rank) continue;
    bool ok = true;
    for (int64_t d = 0; d < axis; ++d) ok = ok && shape[static_cast<size_t>(d)] == 1;
    std::vector<int> roots;
    size_t total = 0;
    for (int v : node.inputs) {
      if (!ok || v < 0) {
        ok = false;
        break;
      }
      int64_t offset = 0;
      const int r = root_of(v, offset);
      const ValuePlan& rp = p.value(r);
      ok = offset == 0 && rp.offset >= 0 && rp.placed_in < 0 && p.bytes(r) == p.bytes(v) &&
           rp.dtype == p.value(out).dtype && std::find(roots.begin(), roots.end(), r) == roots.end();
      roots.push_back(r);
      total += p.bytes(v);
    }
    if (!ok || total != p.bytes(out)) continue;
    int64_t at = 0;
    for (int r : roots) {
      ValuePlan& rp = p.value(r);
      rp.placed_in = out;
      rp.placed_offset = at;
      rp.offset = -1;
      at += static_cast<int64_t>(p.bytes(r));
    }
    p.nodes[n].mode = NodePlan::Mode::Elided;
    p.early_outputs.push_back(out);
  }
}

}  // namespace onebit
