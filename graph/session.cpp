#include "graph/session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/memory_budget.h"
#include "base/thread_pool.h"
#include "graph/evaluate.h"
#include "graph/kernel.h"
#include "graph/op_registry.h"
#include "graph/planner.h"

namespace onebit {

namespace {

constexpr size_t kPlansKept = 6;

std::vector<Shape> shapes_of(const std::vector<const Tensor*>& inputs) {
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  for (const Tensor* t : inputs) shapes.push_back(t->shape());
  return shapes;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// KernelOptions::kv_dtype left Undefined: the model's own, float16 when
// every cache input the session is asked to keep is declared float16, or is
// read only through Casts to float16 (an export converted to float16 that
// keeps float32 inputs); the store then holds exactly what the graph
// computes. float32 otherwise.
DType kv_dtype_for(const Graph& g, const SessionOptions& o) {
  if (o.kernel.kv_dtype != DType::Undefined) return o.kernel.kv_dtype;
  if (!o.kv_state || o.kv_state_inputs.empty()) return DType::F32;
  const std::vector<std::string>& names = o.kv_state_inputs;
  const std::vector<std::vector<int>> readers = g.consumers();
  auto read_as_f16 = [&](int v) {
    const std::vector<int>& rs = readers[static_cast<size_t>(v)];
    return !rs.empty() && std::all_of(rs.begin(), rs.end(), [&](int r) {
      const Node& n = g.node(r);
      return n.op_type == "Cast" && n.domain.empty() &&
             n.attrs.get_int("to", 0) == static_cast<int64_t>(DType::F16);
    });
  };
  size_t f16 = 0;
  for (int v : g.inputs) {
    const Value& val = g.value(v);
    if (std::find(names.begin(), names.end(), val.name) == names.end()) continue;
    if (val.dtype == DType::F16 || read_as_f16(v)) ++f16;
  }
  return f16 == names.size() ? DType::F16 : DType::F32;
}

}  // namespace

Session::Session(Graph graph, const OpRegistry& registry, const SessionOptions& options)
    : graph_(std::move(graph)), options_(options) {
  options_.kernel.kv_dtype = kv_dtype_for(graph_, options_);
  pool_ = std::make_unique<ThreadPool>(options_.threads > 0 ? options_.threads : ThreadPool::default_threads());
  PassContext ctx{options_, registry, report_, *pool_};
  run_passes(graph_, ctx);
  create_kernels(registry);
  planner_ = std::make_unique<Planner>(graph_, kernels_, *pool_);
  output_slot_.assign(graph_.values.size(), 0);
  for (size_t i = 0; i < graph_.outputs.size(); ++i) output_slot_[static_cast<size_t>(graph_.outputs[i])] = i;
  outputs_ = std::make_unique<OutputPool>(graph_.outputs.size(), graph_.path);
  profiler_ = Profiler(graph_.nodes.size());
  if (options_.profile) planner_->set_profiler(&profiler_);
  planner_->set_regrow(options_.regrow_plans);
  made_.resize(graph_.values.size());
  at_.resize(graph_.values.size());
  io_at_.reserve(2 * graph_.nodes.size() + 1);
  for (const Node& node : graph_.nodes) {
    io_at_.push_back(io_.size());
    io_.insert(io_.end(), node.inputs.begin(), node.inputs.end());
    io_at_.push_back(io_.size());
    io_.insert(io_.end(), node.outputs.begin(), node.outputs.end());
  }
  io_at_.push_back(io_.size());
}

Session::~Session() = default;

// Kernels; every node without one is collected so the error lists them all.
void Session::create_kernels(const OpRegistry& registry) {
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
    KernelInfo info(graph_, node, pool_.get(), options_.kernel);
    kernels_[n] = with_context([&] { return graph_.node_label(node); }, [&] { return entry->create(info); });
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int v = node.inputs[i];
      if (v < 0 || !kernels_[n]->packs_constant(static_cast<int>(i))) continue;
      Value& val = graph_.value(v);
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
}

std::string Session::profile_report() const { return profiler_.report(graph_, kernels_); }

void Session::reset_profile() { profiler_.reset(); }

void Session::release_constant(Value& val) {
  const Tensor& t = *val.constant;
  const uint8_t* p = static_cast<const uint8_t*>(t.raw());
  // Pages wholly inside the tensor, in a file mapping, go back to the page
  // cache; elsewhere the storage is freed when its last view goes.
  for (const Graph::Region& r : graph_.mapped)
    if (range_inside(p, t.bytes(), r.data, r.size)) release_pages(p, t.bytes());
  stats_.released_bytes += t.bytes();
  val.constant = Tensor(t.dtype(), t.shape(), nullptr);
}

void Session::reserve(const std::vector<NamedTensor>& inputs) {
  ++stats_.plans_built;
  const std::vector<const Tensor*> bound = bind_inputs(inputs);
  const Plan* plan = &keep_plan(shapes_of(bound), planner_->build(bound));
  ensure_arena(plan->arena_bytes);
  for (size_t i = 0; i < graph_.outputs.size(); ++i) {
    const int v = graph_.outputs[i];
    const ValuePlan& vp = plan->value(v);
    const int producer = graph_.value(v).producer;
    // An output that is an input or a constant has no producer to plan.
    if (vp.dtype == DType::Undefined || vp.held || producer < 0 || plan->node(producer).mode == NodePlan::Mode::Dynamic)
      continue;
    // Two buffers per output: the caller may hold one (a cache fed back) while the next run fills the other.
    std::vector<Tensor> held;
    for (int copy = 0; copy < 2; ++copy) held.push_back(outputs_->buffer(i, vp.dtype, vp.shape()));
  }
  stats_.output_allocations = outputs_->allocations();
}

std::vector<Shape> Session::value_shapes(const std::vector<NamedTensor>& inputs) {
  const std::unique_ptr<Plan> plan = planner_->build(bind_inputs(inputs));
  std::vector<Shape> shapes(graph_.values.size());
  for (size_t v = 0; v < shapes.size(); ++v)
    if (!plan->values[v].dynamic) shapes[v] = plan->values[v].shape();
  return shapes;
}

std::vector<std::string> Session::input_names() const {
  std::vector<std::string> names;
  for (int v : graph_.inputs) names.push_back(graph_.value(v).name);
  return names;
}

std::vector<std::string> Session::output_names() const {
  std::vector<std::string> names;
  for (int v : graph_.outputs) names.push_back(graph_.value(v).name);
  return names;
}

std::vector<const Tensor*> Session::bind_inputs(const std::vector<NamedTensor>& inputs) const {
  std::vector<const Tensor*> bound(graph_.inputs.size(), nullptr);
  for (const NamedTensor& in : inputs) {
    size_t slot = bound.size();
    for (size_t i = 0; i < graph_.inputs.size(); ++i)
      if (graph_.value(graph_.inputs[i]).name == in.name) slot = i;
    if (slot == bound.size()) {
      std::string names;
      for (const auto& n : input_names()) names += (names.empty() ? "" : ", ") + n;
      fail("{}: the graph has no input '{}' (inputs: {})", graph_.path, in.name, names);
    }
    bound[slot] = &in.tensor;
  }
  std::map<std::string, int64_t> symbols;  // dim_param -> value seen
  for (size_t i = 0; i < bound.size(); ++i) {
    const Value& v = graph_.value(graph_.inputs[i]);
    if (!bound[i]) fail("{}: input '{}' was not given", graph_.path, v.name);
    const Tensor& t = *bound[i];
    if (v.dtype != DType::Undefined && t.dtype() != v.dtype)
      fail("{}: input '{}' is {}, the graph declares {}", graph_.path, v.name, dtype_name(t.dtype()),
           dtype_name(v.dtype));
    if (t.dtype() == DType::Bool && t.raw())
      for (int64_t e = 0; e < t.size(); ++e)
        if (static_cast<const uint8_t*>(t.raw())[e] > 1)
          fail("{}: bool input '{}' holds byte {} at element {}, expected 0 or 1", graph_.path, v.name,
               static_cast<const uint8_t*>(t.raw())[e], e);
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

namespace {

// Whether a plan built for `built` has room for `shapes`: the same ranks,
// no dim larger; and how many dims differ from `now` (what patching costs).
std::optional<size_t> fits(const std::vector<Shape>& shapes, const std::vector<Shape>& built,
                           const std::vector<Shape>& now) {
  size_t differ = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i].size() != built[i].size()) return std::nullopt;
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      if (shapes[i][d] > built[i][d]) return std::nullopt;
      differ += shapes[i][d] != now[i][d];
    }
  }
  return differ;
}

}  // namespace

const Plan& Session::keep_plan(std::vector<Shape> shapes, std::unique_ptr<Plan> plan) {
  std::vector<Shape> built = shapes;
  plans_.push_front(KeptPlan{std::move(shapes), std::move(built), std::move(plan)});
  if (plans_.size() > kPlansKept) plans_.pop_back();
  return *plans_.front().plan;
}

const Plan& Session::plan_for(const std::vector<const Tensor*>& inputs) {
  std::vector<Shape> key = shapes_of(inputs);
  for (auto it = plans_.begin(); it != plans_.end(); ++it)
    if (it->shapes == key) {
      plans_.splice(plans_.begin(), plans_, it);
      return *plans_.front().plan;
    }
  const auto t0 = Clock::now();
  const double folds_before = profiler_.node_ms();  // folds a patch evaluates are timed as their nodes
  if (options_.patch_plans) {
    // The kept plan with room for these shapes that is nearest to them now.
    auto best = plans_.end();
    size_t best_differ = SIZE_MAX;
    for (auto it = plans_.begin(); it != plans_.end(); ++it)
      if (const std::optional<size_t> d = fits(key, it->built, it->shapes); d && *d < best_differ) {
        best = it;
        best_differ = *d;
      }
    if (best != plans_.end()) {
      bool patched = false;
      try {
        patched = planner_->patch(*best->plan, inputs);
      } catch (...) {
        plans_.erase(best);  // a kernel refused these shapes partway: the plan is half-patched
        throw;
      }
      if (patched) {
        const Plan& plan = *best->plan;
        ++stats_.plans_patched;
        stats_.plans_regrown += plan.regrown;
        stats_.nodes_patched += plan.patched_nodes;
        best->shapes = std::move(key);
        plans_.splice(plans_.begin(), plans_, best);
        if (options_.profile)
          profiler_.add_patch(ms_since(t0) - (profiler_.node_ms() - folds_before), plan.patched_nodes,
                              plan.refolded_nodes, plan.regrown);
        return *plans_.front().plan;
      }
      plans_.erase(best);  // left half-patched: unusable
    }
  }
  ++stats_.plans_built;
  auto plan = planner_->build(inputs);
  if (options_.profile) profiler_.add_plan(ms_since(t0));
  return keep_plan(std::move(key), std::move(plan));
}

void Session::ensure_arena(size_t bytes) {
  if (bytes <= arena_size_) return;
  // Grow with headroom so a decode loop whose shapes creep up one position
  // per step settles instead of reallocating every step.
  const size_t size = std::max(bytes + bytes / 4, size_t{1} << 20);
  const size_t rounded = (size + 63) / 64 * 64;
  arena_.reset();  // the old arena's bytes go back to the budget first
  arena_ = budgeted_shared(rounded, 64, fmt::format("{}: the run's {}-byte arena", graph_.path, rounded));
  arena_size_ = rounded;
  ++stats_.arena_allocations;
  stats_.arena_bytes = arena_size_;
}

// Where a static node's outputs live this run: kernel-held, a view, placed
// inside a graph output, an arena slot, or a graph-output buffer.
void Session::bind_outputs(const Plan& p, const int* out_ids, const std::vector<const Tensor*>& at, uint8_t* arena,
                           std::vector<Tensor>& outs) {
  for (size_t o = 0; o < outs.size(); ++o) {
    const int v = out_ids[o];
    if (v < 0) continue;
    const ValuePlan& vp = p.value(v);
    if (vp.held) {
      outs[o].rebind(vp.dtype, vp.dims(), vp.rank(), vp.count(), nullptr);
    } else if (vp.alias_of >= 0) {
      // A view of a shape-only tensor (the past a KV state stands for) is
      // shape-only too: no offset from null.
      const Tensor& src = *at[static_cast<size_t>(vp.alias_of)];
      auto* base = static_cast<uint8_t*>(src.raw());
      outs[o].rebind(vp.dtype, vp.dims(), vp.rank(), vp.count(), base ? base + vp.alias_offset : nullptr, src.owner());
    } else if (vp.placed_in >= 0) {
      const Tensor& dst = *at[static_cast<size_t>(vp.placed_in)];
      outs[o].rebind(vp.dtype, vp.dims(), vp.rank(), vp.count(), static_cast<uint8_t*>(dst.raw()) + vp.placed_offset,
                     dst.owner());
    } else if (vp.offset >= 0) {
      outs[o].rebind(vp.dtype, vp.dims(), vp.rank(), vp.count(), arena + vp.offset);
    } else {
      outs[o] = outputs_->buffer(output_slot_[static_cast<size_t>(v)], vp.dtype, vp.shape());
    }
  }
}

std::vector<Tensor> Session::run(const std::vector<NamedTensor>& named_inputs) {
  const std::vector<const Tensor*> inputs = bind_inputs(named_inputs);
  const Plan& p = plan_for(inputs);
  ensure_arena(p.arena_bytes);
  ++stats_.runs;
  profiler_.add_run();
  stats_.planned_bytes = p.arena_bytes;
  uint8_t* arena = static_cast<uint8_t*>(arena_.get());

  // Every value in made_ (empty until its node runs, or never: a value
  // nothing needs this run), but those the plan knows and constants
  // (released ones: shape only), which are read where they are.
  for (size_t v = 0; v < at_.size(); ++v) at_[v] = &made_[v];
  for (const auto& [v, t] : p.fixed) at_[static_cast<size_t>(v)] = t;
  for (size_t i = 0; i < graph_.inputs.size(); ++i) at_[static_cast<size_t>(graph_.inputs[i])] = inputs[i];
  for (int o : p.early_outputs) {
    const ValuePlan& vp = p.value(o);
    made_[static_cast<size_t>(o)] = outputs_->buffer(output_slot_[static_cast<size_t>(o)], vp.dtype, vp.shape());
    at_[static_cast<size_t>(o)] = &made_[static_cast<size_t>(o)];
  }
  // Whatever happens, no tensor a node made outlives the run.
  // (Their shapes' storage is kept: the next run binds outputs into it.)
  struct Forget {
    std::vector<Tensor>& made;
    std::vector<Tensor>& outs;
    ~Forget() {
      for (Tensor& t : made) t.release();
      for (Tensor& t : outs) t.release();
    }
  } forget{made_, outs_};

  std::vector<const Tensor*>& ins = ins_;
  std::vector<Tensor>& outs = outs_;
  stats_.nodes_run = 0;
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    const NodePlan::Mode mode = p.nodes[n].mode;
    if (mode == NodePlan::Mode::Folded || mode == NodePlan::Mode::Elided) continue;
    ++stats_.nodes_run;
    const Node& node = graph_.nodes[n];
    Kernel& kernel = *kernels_[n];
    const int* in_ids = io_.data() + io_at_[2 * n];
    const int* out_ids = io_.data() + io_at_[2 * n + 1];
    const size_t in_count = io_at_[2 * n + 1] - io_at_[2 * n], out_count = io_at_[2 * n + 2] - io_at_[2 * n + 1];
    ins.assign(in_count, nullptr);
    for (size_t i = 0; i < in_count; ++i)
      if (in_ids[i] >= 0) ins[i] = at_[static_cast<size_t>(in_ids[i])];
    outs.resize(out_count);
    for (Tensor& t : outs) t.release();

    if (mode == NodePlan::Mode::Static) {
      with_context([&] { return graph_.node_label(node); }, [&] { bind_outputs(p, out_ids, at_, arena, outs); });
      void* workspace = p.nodes[n].workspace_at >= 0 ? arena + p.nodes[n].workspace_at : nullptr;
      RunContext ctx(ins.data(), static_cast<int>(ins.size()), outs.data(), static_cast<int>(outs.size()), workspace,
                     p.nodes[n].workspace_bytes, *pool_);
      if (options_.profile) {
        const auto t0 = Clock::now();
        with_context([&] { return graph_.node_label(node); }, [&] { kernel.run(ctx); });
        profiler_.add_node(n, ms_since(t0));
      } else {
        with_context([&] { return graph_.node_label(node); }, [&] { kernel.run(ctx); });
      }
      for (size_t o = 0; o < out_count && p.nodes[n].holds; ++o) {
        const int v = out_ids[o];
        if (v < 0 || !p.value(v).held) continue;
        if (outs[o].shape() != p.value(v).shape() || (!outs[o].raw() && outs[o].size() > 0))
          fail("{}: kernel did not provide its held output {} as {}", graph_.node_label(node), o,
               shape_str(p.value(v).shape()));
      }
    } else {
      outs = with_context([&] { return graph_.node_label(node); },
                          [&] { return evaluate_node(graph_, node, kernel, ins, *pool_); });
    }
    for (size_t o = 0; o < out_count; ++o) {
      const int v = out_ids[o];
      if (v < 0) continue;
      std::swap(made_[static_cast<size_t>(v)], outs[o]);  // outs[o] takes the released tensor's shape storage
      at_[static_cast<size_t>(v)] = &made_[static_cast<size_t>(v)];
    }
  }
  stats_.output_allocations = outputs_->allocations();

  std::vector<Tensor> result;
  result.reserve(graph_.outputs.size());
  for (size_t i = 0; i < graph_.outputs.size(); ++i) {
    const int v = graph_.outputs[i];
    // A value the graph lists twice as an output: the later one is a copy of
    // the first (whose tensor may have been moved out below).
    size_t first = 0;
    while (graph_.outputs[first] != v) ++first;
    if (first < i) {
      result.push_back(Tensor::clone(result[first]));
      continue;
    }
    const Tensor& t = *at_[static_cast<size_t>(v)];
    const ValuePlan& vp = p.value(v);
    // Views into the arena, the inputs, constants or a kernel's storage are
    // copied so the caller owns what it gets.
    const bool owned = &t == &made_[static_cast<size_t>(v)] && t.owner() && vp.offset < 0 && vp.alias_of < 0 &&
                       !vp.known && !vp.held && !graph_.value(v).is_input;
    result.push_back(owned ? std::move(made_[static_cast<size_t>(v)]) : Tensor::clone(t));
  }
  return result;
}

}  // namespace onebit
