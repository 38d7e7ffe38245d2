#include "graph/session.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <set>

#include "graph/error.h"
#include "graph/evaluate.h"
#include "graph/memory_plan.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "ops/thread_pool.h"

namespace onebit {

namespace {

// Nodes whose outputs total at most this many bytes, with every input known,
// are evaluated while planning (shape subgraphs, masks, position tables).
constexpr size_t kPlanFoldBytes = size_t{16} << 20;
constexpr size_t kPlansKept = 4;
constexpr int kNever = std::numeric_limits<int>::max();

}  // namespace

struct Plan {
  // Elided: a Concat whose inputs were written into its output in place.
  enum class Mode : uint8_t { Folded, Static, Dynamic, Elided };
  std::vector<Mode> mode;               // per node
  std::vector<int64_t> workspace_at;    // per node: arena offset of its workspace, -1 none
  std::vector<DType> dtype;             // per value (static and known values)
  std::vector<Shape> shape;             // per value
  std::vector<int64_t> offset;          // per value: arena offset, -1 none
  std::vector<int> alias_of;            // per value: value whose storage it views, -1 none
  std::vector<int64_t> alias_offset;    // per value: byte offset of the view in that storage
  std::vector<bool> held;               // per value: storage its kernel keeps (ReshapeContext::hold_output)
  std::vector<const Tensor*> known;     // per value: constant or folded at plan time
  std::deque<Tensor> folded;            // storage for values folded at plan time
  std::vector<int> placed_in;           // per value: graph output whose buffer holds it, -1 none
  std::vector<int64_t> placed_offset;   // per value: byte offset inside that output
  std::vector<int> early_outputs;       // graph outputs allocated before the first node runs
  size_t arena_bytes = 0;
};

std::vector<Tensor> evaluate_node(const Graph& g, const Node& node, Kernel& kernel,
                                  const std::vector<const Tensor*>& inputs, ThreadPool& pool) {
  std::vector<InputInfo> infos(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    infos[i].present = true;
    infos[i].dtype = inputs[i]->dtype();
    infos[i].shape = inputs[i]->shape();
    infos[i].value = inputs[i]->raw() || inputs[i]->size() == 0 ? inputs[i] : nullptr;
  }
  std::vector<bool> present(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) present[o] = node.outputs[o] >= 0;
  ReshapeContext rc(std::move(infos), static_cast<int>(node.outputs.size()), present);
  kernel.reshape(rc);
  std::vector<Tensor> outs(node.outputs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const OutputPlan& p = rc.outputs()[o];
    if (!present[o]) continue;
    if (!p.set) fail("{}: kernel did not plan output {}", g.node_label(node), o);
    outs[o] = p.held ? Tensor(p.dtype, p.shape, nullptr) : Tensor::allocate(p.dtype, p.shape);
  }
  std::vector<uint8_t> workspace(rc.workspace() + 64);
  void* ws = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
  RunContext ctx(inputs.data(), static_cast<int>(inputs.size()), outs.data(), static_cast<int>(outs.size()),
                 rc.workspace() ? ws : nullptr, pool);
  kernel.run(ctx);
  return outs;
}

Session::Session(Graph graph, const SessionOptions& options) : graph_(std::move(graph)), options_(options) {
  pool_ = std::make_unique<ThreadPool>(options_.threads > 0 ? options_.threads : ThreadPool::default_threads());
  run_passes(graph_, options_, report_, *pool_);

  // Kernels; every node without one is collected so the error lists them all.
  const OpRegistry& registry = OpRegistry::global();
  std::map<std::string, std::vector<std::string>> unsupported;  // "domain::Op (opset N)" -> node names
  kernels_.resize(graph_.nodes.size());
  // A constant every reader has packed a copy of is released as soon as its
  // last reader is created, so the originals and the packed copies never
  // all coexist (the peak of a load is one weight above the packed model).
  std::vector<int> unpacked_readers(graph_.values.size(), 0);
  for (const Node& node : graph_.nodes)
    for (int v : node.inputs)
      if (v >= 0) ++unpacked_readers[static_cast<size_t>(v)];
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    const Node& node = graph_.nodes[n];
    const OpEntry* entry = registry.find(node.domain, node.op_type, node.opset);
    if (!entry) {
      unsupported[fmt::format("{}::{} (opset {})", domain_name(node.domain), node.op_type, node.opset)].push_back(
          node.name);
      continue;
    }
    KernelInfo info(graph_, node, pool_.get());
    kernels_[n] = with_context([&] { return graph_.node_label(node); }, [&] { return entry->create(info); });
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int v = node.inputs[i];
      if (v < 0 || !kernels_[n]->packs_constant(static_cast<int>(i))) continue;
      Value& val = graph_.values[static_cast<size_t>(v)];
      if (--unpacked_readers[static_cast<size_t>(v)] == 0 && val.constant && val.constant->raw() && !val.is_output)
        release_constant(val);
    }
  }
  if (!unsupported.empty()) {
    std::string list;
    size_t count = 0;
    for (const auto& [op, names] : unsupported) {
      count += names.size();
      list += fmt::format("\n  {} x{}: '{}'{}", op, names.size(), names.front(), names.size() > 1 ? ", ..." : "");
    }
    fail("{}: {} node(s) use ops 1bit does not implement:{}", graph_.path, count, list);
  }

  last_use_.assign(graph_.values.size(), -1);
  for (size_t n = 0; n < graph_.nodes.size(); ++n)
    for (int v : graph_.nodes[n].inputs)
      if (v >= 0) last_use_[static_cast<size_t>(v)] = static_cast<int>(n);
  for (int v : graph_.outputs) last_use_[static_cast<size_t>(v)] = kNever;
  output_slot_.assign(graph_.values.size(), 0);
  for (size_t i = 0; i < graph_.outputs.size(); ++i) output_slot_[static_cast<size_t>(graph_.outputs[i])] = i;
  output_pool_.resize(graph_.outputs.size());
  node_ms_.assign(graph_.nodes.size(), 0.0);
}

std::string Session::profile_report() const {
  struct Row {
    double ms = 0;
    int nodes = 0;
    size_t worst = 0;
  };
  std::map<std::string, Row> by_op;
  double total = 0;
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    const Node& node = graph_.nodes[n];
    Row& r = by_op[node.domain.empty() ? node.op_type : node.domain + "::" + node.op_type];
    if (r.nodes == 0 || node_ms_[n] > node_ms_[r.worst]) r.worst = n;
    r.ms += node_ms_[n];
    ++r.nodes;
    total += node_ms_[n];
  }
  std::vector<std::pair<std::string, Row>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::string s = fmt::format("profile: {:.1f} ms in kernels over {} runs, {:.1f} ms planning {} new shapes\n", total,
                              profile_runs_, plan_ms_, profile_plans_);
  for (const auto& [op, r] : rows) {
    if (r.ms <= 0) continue;
    s += fmt::format("  {:<28} {:>9.1f} ms {:>5.1f}%  {:>4} nodes  worst '{}' {}\n", op, r.ms, 100 * r.ms / total, r.nodes,
                     graph_.nodes[r.worst].name, kernels_[r.worst] ? kernels_[r.worst]->describe() : "");
  }
  return s;
}

void Session::reset_profile() {
  std::fill(node_ms_.begin(), node_ms_.end(), 0.0);
  profile_runs_ = profile_plans_ = 0;
  plan_ms_ = 0;
}

void Session::release_constant(Value& val) {
  const Tensor& t = *val.constant;
  const uint8_t* p = static_cast<const uint8_t*>(t.raw());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Pages wholly inside the tensor, in a file mapping, go back to the page
  // cache; elsewhere the storage is freed when its last view goes.
  for (const Graph::Region& r : graph_.mapped) {
    if (!p || p < r.data || p + t.bytes() > r.data + r.size) continue;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + t.bytes()) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
  stats_.released_bytes += t.bytes();
  val.constant = Tensor(t.dtype(), t.shape(), nullptr);
}

void Session::reserve(const std::vector<NamedTensor>& inputs) {
  const std::unique_ptr<Plan> plan = build_plan(bind_inputs(inputs));
  ensure_arena(plan->arena_bytes);
  for (size_t i = 0; i < graph_.outputs.size(); ++i) {
    const size_t v = static_cast<size_t>(graph_.outputs[i]);
    if (plan->dtype[v] == DType::Undefined || plan->mode[static_cast<size_t>(std::max(0, graph_.values[v].producer))] ==
                                                   Plan::Mode::Dynamic)
      continue;
    // Two buffers per output: the caller may hold one (a cache fed back) while the next run fills the other.
    std::vector<Tensor> held;
    for (int copy = 0; copy < 2; ++copy) held.push_back(output_buffer(i, plan->dtype[v], plan->shape[v]));
  }
}

Tensor Session::output_buffer(size_t slot, DType dtype, const Shape& shape) {
  const size_t bytes = std::max<size_t>(64, dtype_bytes(dtype, numel(shape)));
  auto& pool = output_pool_[slot];
  for (OutputBuffer& b : pool)
    if (b.storage.use_count() == 1 && b.capacity >= bytes) return Tensor(dtype, shape, b.storage.get(), b.storage);
  // Headroom so outputs that grow by a position per step (present) settle;
  // two buffers per output cover a caller holding last step's while the
  // next runs (present fed back as past).
  const size_t capacity = (bytes + bytes / 4 + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, capacity);
  if (!p) fail("{}: out of memory allocating {} bytes for an output", graph_.path, capacity);
  std::shared_ptr<void> storage(p, [](void* q) { std::free(q); });
  ++stats_.output_allocations;
  auto victim = std::find_if(pool.begin(), pool.end(), [](const OutputBuffer& b) { return b.storage.use_count() == 1; });
  if (victim != pool.end()) *victim = {storage, capacity};
  else if (pool.size() < 2) pool.push_back({storage, capacity});
  return Tensor(dtype, shape, p, storage);
}

Session::~Session() = default;

std::vector<std::string> Session::input_names() const {
  std::vector<std::string> names;
  for (int v : graph_.inputs) names.push_back(graph_.values[static_cast<size_t>(v)].name);
  return names;
}

std::vector<std::string> Session::output_names() const {
  std::vector<std::string> names;
  for (int v : graph_.outputs) names.push_back(graph_.values[static_cast<size_t>(v)].name);
  return names;
}

std::vector<const Tensor*> Session::bind_inputs(const std::vector<NamedTensor>& inputs) const {
  std::vector<const Tensor*> bound(graph_.inputs.size(), nullptr);
  for (const NamedTensor& in : inputs) {
    size_t slot = bound.size();
    for (size_t i = 0; i < graph_.inputs.size(); ++i)
      if (graph_.values[static_cast<size_t>(graph_.inputs[i])].name == in.name) slot = i;
    if (slot == bound.size()) {
      std::string names;
      for (const auto& n : input_names()) names += (names.empty() ? "" : ", ") + n;
      fail("{}: the graph has no input '{}' (inputs: {})", graph_.path, in.name, names);
    }
    bound[slot] = &in.tensor;
  }
  std::map<std::string, int64_t> symbols;  // dim_param -> value seen
  for (size_t i = 0; i < bound.size(); ++i) {
    const Value& v = graph_.values[static_cast<size_t>(graph_.inputs[i])];
    if (!bound[i]) fail("{}: input '{}' was not given", graph_.path, v.name);
    const Tensor& t = *bound[i];
    if (v.dtype != DType::Undefined && t.dtype() != v.dtype)
      fail("{}: input '{}' is {}, the graph declares {}", graph_.path, v.name, dtype_name(t.dtype()),
           dtype_name(v.dtype));
    if (!v.has_shape) continue;
    if (static_cast<size_t>(t.rank()) != v.dims.size())
      fail("{}: input '{}' has shape {} (rank {}), the graph declares rank {}", graph_.path, v.name,
           shape_str(t.shape()), t.rank(), v.dims.size());
    for (size_t d = 0; d < v.dims.size(); ++d) {
      const Dim& dim = v.dims[d];
      const int64_t got = t.shape()[d];
      if (dim.value >= 0 && got != dim.value)
        fail("{}: input '{}' dim {} is {}, the graph declares {}", graph_.path, v.name, d, got, dim.value);
      if (dim.value < 0 && !dim.param.empty()) {
        auto [it, fresh] = symbols.emplace(dim.param, got);
        if (!fresh && it->second != got)
          fail("{}: input '{}' dim {} ('{}') is {}, but another input has '{}' = {}", graph_.path, v.name, d,
               dim.param, got, dim.param, it->second);
      }
    }
  }
  return bound;
}

std::unique_ptr<Plan> Session::build_plan(const std::vector<const Tensor*>& inputs) {
  ++stats_.plans_built;
  const size_t nv = graph_.values.size(), nn = graph_.nodes.size();
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.mode.assign(nn, Plan::Mode::Static);
  p.workspace_at.assign(nn, -1);
  p.dtype.assign(nv, DType::Undefined);
  p.shape.assign(nv, {});
  p.offset.assign(nv, -1);
  p.alias_of.assign(nv, -1);
  p.alias_offset.assign(nv, 0);
  p.held.assign(nv, false);
  p.known.assign(nv, nullptr);
  p.placed_in.assign(nv, -1);
  p.placed_offset.assign(nv, 0);
  std::vector<bool> dynamic(nv, false);  // shape unknown until run time

  for (size_t v = 0; v < nv; ++v) {
    const Value& val = graph_.values[v];
    if (val.constant) {
      // A released constant (packed by its readers) keeps its dtype and
      // shape for planning but is no longer a value anyone may read.
      if (val.constant->raw() || val.constant->bytes() == 0) p.known[v] = &*val.constant;
      p.dtype[v] = val.constant->dtype();
      p.shape[v] = val.constant->shape();
    }
  }
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    const size_t v = static_cast<size_t>(graph_.inputs[i]);
    p.dtype[v] = inputs[i]->dtype();
    p.shape[v] = inputs[i]->shape();
  }

  MemoryPlanner arena;
  std::vector<int> refs(nv, 0);  // live views of each arena root
  auto root_of = [&](int v) {
    while (p.alias_of[static_cast<size_t>(v)] >= 0) v = p.alias_of[static_cast<size_t>(v)];
    return v;
  };
  auto slot_bytes = [&](size_t v) { return std::max<size_t>(1, dtype_bytes(p.dtype[v], numel(p.shape[v]))); };
  auto release = [&](int v) {
    const size_t r = static_cast<size_t>(root_of(v));
    if (p.offset[r] >= 0 && --refs[r] == 0) arena.release(static_cast<size_t>(p.offset[r]), slot_bytes(r));
  };

  for (size_t n = 0; n < nn; ++n) {
    const Node& node = graph_.nodes[n];
    Kernel& kernel = *kernels_[n];
    bool any_dynamic = kernel.shape_depends_on_data();
    bool all_known = true;
    std::vector<InputInfo> infos(node.inputs.size());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int v = node.inputs[i];
      if (v < 0) continue;
      if (dynamic[static_cast<size_t>(v)]) any_dynamic = true;
      infos[i].present = true;
      infos[i].dtype = p.dtype[static_cast<size_t>(v)];
      infos[i].shape = p.shape[static_cast<size_t>(v)];
      infos[i].value = p.known[static_cast<size_t>(v)];
      if (!infos[i].value && kernel.needs_input_data(static_cast<int>(i))) all_known = false;
    }
    auto mark_dynamic = [&] {
      p.mode[n] = Plan::Mode::Dynamic;
      for (int o : node.outputs)
        if (o >= 0) dynamic[static_cast<size_t>(o)] = true;
    };
    if (any_dynamic) {
      mark_dynamic();
      continue;
    }
    std::vector<bool> present(node.outputs.size());
    for (size_t o = 0; o < node.outputs.size(); ++o) present[o] = node.outputs[o] >= 0;
    ReshapeContext rc(std::move(infos), static_cast<int>(node.outputs.size()), present);
    try {
      with_context([&] { return graph_.node_label(node); }, [&] { kernel.reshape(rc); });
    } catch (const NeedsValue&) {
      mark_dynamic();
      continue;
    }
    size_t out_bytes = 0;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (!present[o]) continue;
      const OutputPlan& op = rc.outputs()[o];
      if (!op.set) fail("{}: kernel did not plan output {}", graph_.node_label(node), o);
      const int64_t count = checked_numel(op.shape);
      if (count < 0) fail("{}: output {} has invalid shape {}", graph_.node_label(node), o, shape_str(op.shape));
      const size_t v = static_cast<size_t>(node.outputs[o]);
      p.dtype[v] = op.dtype;
      p.shape[v] = op.shape;
      out_bytes += dtype_bytes(op.dtype, count);
    }

    bool holds = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) holds = holds || (present[o] && rc.outputs()[o].held);
    if (all_known && out_bytes <= kPlanFoldBytes && !holds) {
      std::vector<const Tensor*> ins(node.inputs.size(), nullptr);
      std::deque<Tensor> shells;  // shape-only stand-ins for inputs whose data is not read
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const int v = node.inputs[i];
        if (v < 0) continue;
        if (p.known[static_cast<size_t>(v)]) {
          ins[i] = p.known[static_cast<size_t>(v)];
        } else {
          shells.emplace_back(p.dtype[static_cast<size_t>(v)], p.shape[static_cast<size_t>(v)], nullptr);
          ins[i] = &shells.back();
        }
      }
      std::vector<Tensor> outs =
          with_context([&] { return graph_.node_label(node); }, [&] { return evaluate_node(graph_, node, kernel, ins, *pool_); });
      for (size_t o = 0; o < outs.size(); ++o) {
        if (node.outputs[o] < 0) continue;
        p.folded.push_back(std::move(outs[o]));
        p.known[static_cast<size_t>(node.outputs[o])] = &p.folded.back();
      }
      p.mode[n] = Plan::Mode::Folded;
      continue;
    }

    // Static: outputs get arena slots (graph outputs are allocated per run).
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (!present[o]) continue;
      const int v = node.outputs[o];
      const Value& val = graph_.values[static_cast<size_t>(v)];
      const OutputPlan& op = rc.outputs()[o];
      const bool unused = last_use_[static_cast<size_t>(v)] < 0;
      if (op.held) {
        if (val.is_output) fail("{}: output '{}' is kernel state and cannot be a graph output", graph_.node_label(node), val.name);
        p.held[static_cast<size_t>(v)] = true;
        continue;
      }
      if (val.is_output) continue;
      if (op.alias_of >= 0) {
        const int src = node.inputs[static_cast<size_t>(op.alias_of)];
        const int r = root_of(src);
        // Views of arena buffers only; a view of a constant or a graph input
        // just points at it (read-only use by later nodes).
        p.alias_of[static_cast<size_t>(v)] = src;
        p.alias_offset[static_cast<size_t>(v)] = op.alias_offset;
        if (p.offset[static_cast<size_t>(r)] >= 0) ++refs[static_cast<size_t>(r)];
        if (unused) release(v);
        continue;
      }
      p.offset[static_cast<size_t>(v)] = static_cast<int64_t>(arena.allocate(slot_bytes(static_cast<size_t>(v))));
      refs[static_cast<size_t>(v)] = 1;
      if (unused) release(v);
    }
    if (rc.workspace() > 0) {
      const size_t at = arena.allocate(rc.workspace());
      p.workspace_at[n] = static_cast<int64_t>(at);
      arena.release(at, rc.workspace());
    }
    for (int v : node.inputs)
      if (v >= 0 && last_use_[static_cast<size_t>(v)] == static_cast<int>(n) && !p.known[static_cast<size_t>(v)])
        release(v);
  }
  place_concat_inputs(p);
  p.arena_bytes = arena.high_water();
  return plan;
}

// A Concat that writes a graph output, along an axis with only 1s before it
// (each input is one contiguous block of the output: the stacked `present`
// of a KV cache), whose inputs are each the whole of an arena value this
// plan produces: those values are placed inside the output buffer, so their
// producers write there directly and the Concat has nothing left to do. It
// saves a copy of the whole cache per decode step. The arena slots planned
// for them stay reserved but unused (never touched, so never resident).
void Session::place_concat_inputs(Plan& p) const {
  auto root_of = [&](int v, int64_t& offset) {
    offset = 0;
    while (p.alias_of[static_cast<size_t>(v)] >= 0) {
      offset += p.alias_offset[static_cast<size_t>(v)];
      v = p.alias_of[static_cast<size_t>(v)];
    }
    return v;
  };
  auto bytes = [&](int v) { return dtype_bytes(p.dtype[static_cast<size_t>(v)], numel(p.shape[static_cast<size_t>(v)])); };
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    const Node& node = graph_.nodes[n];
    if (node.op_type != "Concat" || !node.domain.empty() || p.mode[n] != Plan::Mode::Static) continue;
    const int out = node.outputs[0];
    if (out < 0 || !graph_.values[static_cast<size_t>(out)].is_output) continue;
    const Shape& shape = p.shape[static_cast<size_t>(out)];
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t axis = node.attrs.get_int("axis", 0);
    if (axis < 0) axis += rank;
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
      ok = offset == 0 && p.offset[static_cast<size_t>(r)] >= 0 && p.placed_in[static_cast<size_t>(r)] < 0 &&
           bytes(r) == bytes(v) && p.dtype[static_cast<size_t>(r)] == p.dtype[static_cast<size_t>(out)] &&
           std::find(roots.begin(), roots.end(), r) == roots.end();
      roots.push_back(r);
      total += bytes(v);
    }
    if (!ok || total != bytes(out)) continue;
    int64_t at = 0;
    for (int r : roots) {
      p.placed_in[static_cast<size_t>(r)] = out;
      p.placed_offset[static_cast<size_t>(r)] = at;
      p.offset[static_cast<size_t>(r)] = -1;
      at += static_cast<int64_t>(bytes(r));
    }
    p.mode[n] = Plan::Mode::Elided;
    p.early_outputs.push_back(out);
  }
}

const Plan& Session::plan_for(const std::vector<const Tensor*>& inputs) {
  std::vector<Shape> key;
  key.reserve(inputs.size());
  for (const Tensor* t : inputs) key.push_back(t->shape());
  for (auto it = plans_.begin(); it != plans_.end(); ++it)
    if (it->first == key) {
      plans_.splice(plans_.begin(), plans_, it);
      return *plans_.front().second;
    }
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = build_plan(inputs);
  if (options_.profile) {
    plan_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++profile_plans_;
  }
  plans_.emplace_front(std::move(key), std::move(plan));
  if (plans_.size() > kPlansKept) plans_.pop_back();
  return *plans_.front().second;
}

void Session::ensure_arena(size_t bytes) {
  if (bytes <= arena_size_) return;
  // Grow with headroom so a decode loop whose shapes creep up one position
  // per step settles instead of reallocating every step.
  const size_t size = std::max(bytes + bytes / 4, size_t{1} << 20);
  const size_t rounded = (size + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("{}: out of memory: the run needs a {} byte arena", graph_.path, rounded);
  arena_.reset(p, [](void* q) { std::free(q); });
  arena_size_ = rounded;
  ++stats_.arena_allocations;
  stats_.arena_bytes = arena_size_;
}

std::vector<Tensor> Session::run(const std::vector<NamedTensor>& named_inputs) {
  const std::vector<const Tensor*> inputs = bind_inputs(named_inputs);
  const Plan& p = plan_for(inputs);
  ensure_arena(p.arena_bytes);
  ++stats_.runs;
  ++profile_runs_;
  stats_.planned_bytes = p.arena_bytes;
  uint8_t* arena = static_cast<uint8_t*>(arena_.get());

  const size_t nv = graph_.values.size();
  std::vector<Tensor> rt(nv);
  for (size_t v = 0; v < nv; ++v) {
    if (p.known[v]) rt[v] = *p.known[v];
    else if (graph_.values[v].constant) rt[v] = *graph_.values[v].constant;  // released: shape only
  }
  for (size_t i = 0; i < graph_.inputs.size(); ++i) rt[static_cast<size_t>(graph_.inputs[i])] = *inputs[i];
  for (int o : p.early_outputs) {
    const size_t vi = static_cast<size_t>(o);
    rt[vi] = output_buffer(output_slot_[vi], p.dtype[vi], p.shape[vi]);
  }

  std::vector<const Tensor*> ins;
  std::vector<Tensor> outs;
  stats_.nodes_run = 0;
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    if (p.mode[n] == Plan::Mode::Folded || p.mode[n] == Plan::Mode::Elided) continue;
    ++stats_.nodes_run;
    const Node& node = graph_.nodes[n];
    Kernel& kernel = *kernels_[n];
    ins.assign(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] >= 0) ins[i] = &rt[static_cast<size_t>(node.inputs[i])];
    outs.assign(node.outputs.size(), Tensor());
    void* workspace = nullptr;

    if (p.mode[n] == Plan::Mode::Static) {
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        const int v = node.outputs[o];
        if (v < 0) continue;
        const size_t vi = static_cast<size_t>(v);
        if (p.held[vi]) {
          outs[o] = Tensor(p.dtype[vi], p.shape[vi], nullptr);
        } else if (p.alias_of[vi] >= 0) {
          const Tensor& src = rt[static_cast<size_t>(p.alias_of[vi])];
          outs[o] = Tensor(p.dtype[vi], p.shape[vi], static_cast<uint8_t*>(src.raw()) + p.alias_offset[vi], src.owner());
        } else if (p.placed_in[vi] >= 0) {
          const Tensor& dst = rt[static_cast<size_t>(p.placed_in[vi])];
          outs[o] = Tensor(p.dtype[vi], p.shape[vi], static_cast<uint8_t*>(dst.raw()) + p.placed_offset[vi], dst.owner());
        }
        else if (p.offset[vi] >= 0)
          outs[o] = Tensor(p.dtype[vi], p.shape[vi], arena + p.offset[vi]);
        else
          outs[o] = output_buffer(output_slot_[vi], p.dtype[vi], p.shape[vi]);
      }
      if (p.workspace_at[n] >= 0) workspace = arena + p.workspace_at[n];
      RunContext ctx(ins.data(), static_cast<int>(ins.size()), outs.data(), static_cast<int>(outs.size()), workspace,
                     *pool_);
      if (options_.profile) {
        const auto t0 = std::chrono::steady_clock::now();
        with_context([&] { return graph_.node_label(node); }, [&] { kernel.run(ctx); });
        node_ms_[n] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      } else {
        with_context([&] { return graph_.node_label(node); }, [&] { kernel.run(ctx); });
      }
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        const int v = node.outputs[o];
        if (v >= 0 && p.held[static_cast<size_t>(v)] &&
            (outs[o].shape() != p.shape[static_cast<size_t>(v)] || (!outs[o].raw() && outs[o].size() > 0)))
          fail("{}: kernel did not provide its held output {} as {}", graph_.node_label(node), o,
               shape_str(p.shape[static_cast<size_t>(v)]));
      }
    } else {
      outs = with_context([&] { return graph_.node_label(node); }, [&] { return evaluate_node(graph_, node, kernel, ins, *pool_); });
    }
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (node.outputs[o] >= 0) rt[static_cast<size_t>(node.outputs[o])] = std::move(outs[o]);
  }

  std::vector<Tensor> result;
  result.reserve(graph_.outputs.size());
  for (int v : graph_.outputs) {
    Tensor& t = rt[static_cast<size_t>(v)];
    // Views into the arena, the inputs or constants are copied so the caller owns what it gets.
    const bool owned = t.owner() && p.offset[static_cast<size_t>(v)] < 0 && p.alias_of[static_cast<size_t>(v)] < 0 &&
                       !p.known[static_cast<size_t>(v)] && !graph_.values[static_cast<size_t>(v)].is_input;
    result.push_back(owned ? std::move(t) : Tensor::clone(t));
  }
  return result;
}

}  // namespace onebit
