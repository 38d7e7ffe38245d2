// KV state: the generator's cache kept inside the session, appended in place.
//
// A cached export rebuilds every layer's cache each step,
//
//   past [2L,1,kvh,P,d] -Slice/Gather(j)-> [1,kvh,P,d] -Concat(·, new, axis 2)-> [1,kvh,P+S,d] -> attention
//                                                                    \-Unsqueeze(0)-> Concat(axis 0) -> present
//
// which reads the whole cache and writes it again every step (each layer's
// Concat, placed in `present`, which the caller feeds back as `past`): at a
// 1024-token past that is 470 MB of traffic a token for Qwen3-0.6B, more than
// its 4-bit weights. When the caller names the cache inputs
// (SessionOptions::kv_state_inputs: `ort-run` and `bench` on a cached
// binding), each such Concat becomes
//
//   com.onebit::KvAppend(new, past)  -> cache [1, kvh, P+S, d], head_stride
//
// whose kernel keeps the layer's cache with room to grow per head, writes the
// S new positions and hands out the whole cache; attention's GqaMatMul reads
// it with the heads head_stride floats apart (its fifth input). `past` is then
// read for its shape only (the past length), and the `present` outputs are
// dropped: the caller passes a shape-only `past` (models/generate.cpp).
// Per-layer caches (`past_key_values.N.key` → `present.N.key`, as Optimum
// exports) are matched the same way, also with the cache in a float type of
// its own inside the graph: past → Cast → Concat → Cast → present, as an
// export converted to float16 keeping float32 inputs and outputs writes it
// (transformers.js' model_fp16.onnx); the Shape nodes that read the first
// Cast then read the past itself.
//
// onnxruntime's GroupQueryAttention (onnxruntime-genai's builds) takes the
// cache whole, past_key_values.N.key/value in and present.N.key/value out,
//
//   GroupQueryAttention(qkv, -, -, past_key, past_value, seqlens_k, total, cos, sin) -> out, present_key, present_value
//
// and becomes com.onebit::GroupQueryAttention on the same inputs with only
// its first output: the kernel keeps the layer's cache and appends to it
// (ops/group_query_attention.cpp). Every named input must be a GQA's
// past_key or past_value (or read by Shape), and every present output a
// graph output nothing inside the graph reads.
//
// Multi-head attention (no repeat_kv, so no GqaMatMul yet) reads the cache
// through MatMul(Q, Transpose(cache)) and MatMul(P, cache); those products
// become GqaMatMuls with one query head per KV head. onnxruntime-genai's
// float16 MultiHeadAttention, once graph/passes/mha_repeat_kv.cpp made it a
// com.onebit::GroupedAttention, reads the Concat as its key or value; it is
// given the head stride as input 10 or 11. Shape nodes may read the Concat.
//
// All or nothing: the pass rewrites only when every present output is made
// of matched Concats whose results only attention products read, and the
// past inputs feed nothing but those Concats and Shape nodes. Otherwise the
// graph is left alone and `kv_state_refused` logs why (ONEBIT_KV_STATE=0
// forces the plain graph, for control runs).
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct Append {
  int concat = -1;     // node index
  int past = -1;       // graph input the cache comes from
  int past_axis = -1;  // its sequence axis
  std::vector<int> slicers;  // Slice/Squeeze/Gather nodes between them, or the Cast
  bool cast = false;         // the past reaches the Concat through a Cast (slicers[0])
};

bool is_cast(const Node& n) { return n.op_type == "Cast" && n.domain.empty() && n.inputs.size() == 1; }

bool is_graph_input(const Graph& g, int v) { return v >= 0 && g.value(v).is_input; }

int64_t axis_attr(const Node& n, int64_t rank) {
  int64_t axis = n.attrs.get_int("axis", 0);
  return axis < 0 ? axis + rank : axis;
}

// Whether Concat input `v` is a slice of a graph input's cache, filling in
// which input, its sequence axis and the slicing nodes:
//   per layer: the input itself (rank 4);
//   stacked:   Squeeze(Slice(past, [j], [j+1], axes [0]), [0]) or Gather(past, j, axis 0) (rank 5).
bool match_past(const Graph& g, int v, Append& a) {
  if (is_graph_input(g, v)) {
    a.past = v;
    a.past_axis = 2;
    return true;
  }
  const Node* n = producer_node(g, v);
  if (!n || !n->domain.empty()) return false;
  if (is_cast(*n) && is_graph_input(g, input_at(*n, 0))) {  // the cache in a type of its own
    a.slicers = {producer_index(g, v)};
    a.past = input_at(*n, 0);
    a.past_axis = 2;
    a.cast = true;
    return true;
  }
  if (n->op_type == "Gather" && n->inputs.size() == 2 && is_graph_input(g, input_at(*n, 0)) &&
      n->attrs.get_int("axis", 0) == 0 && constant_scalar(g, input_at(*n, 1)).has_value()) {
    a.slicers = {producer_index(g, v)};
    a.past = input_at(*n, 0);
  } else if (n->op_type == "Squeeze" && n->inputs.size() == 2 && constant_ints_equal(g, input_at(*n, 1), {0})) {
    const Node* s = producer_op(g, input_at(*n, 0), "Slice");
    if (!s || s->inputs.size() < 4 || !is_graph_input(g, input_at(*s, 0)) || !constant_ints_equal(g, input_at(*s, 3), {0}))
      return false;
    a.slicers = {producer_index(g, v), producer_index(g, input_at(*n, 0))};
    a.past = input_at(*s, 0);
  } else {
    return false;
  }
  a.past_axis = 3;
  return true;
}

// Multi-head attention (as many query heads as KV heads) has no repeat_kv
// for the GQA fusion to match: the cache reaches its products directly,
//   MatMul(Q, Transpose(cache, perm 0,1,3,2))   or   MatMul(P, cache).
// For reader `r` of `cache`, the MatMul node that is such a product, else -1.
template <class Readers>
int attention_product(const Graph& g, const Readers& readers, int cache, int r) {
  const Node& c = g.node(r);
  if (c.op_type == "MatMul" && c.domain.empty() && c.inputs.size() == 2 && c.inputs[1] == cache && c.inputs[0] != cache)
    return r;
  if (c.op_type == "Transpose" && c.domain.empty() && c.attrs.get_ints("perm", {}) == std::vector<int64_t>{0, 1, 3, 2} &&
      readers(c.outputs[0]).size() == 1) {
    const int m = readers(c.outputs[0])[0];
    const Node& mm = g.node(m);
    if (mm.op_type == "MatMul" && mm.domain.empty() && mm.inputs.size() == 2 && mm.inputs[1] == c.outputs[0] &&
        mm.inputs[0] != c.outputs[0])
      return m;
  }
  return -1;
}

// All or nothing: one refusal leaves every exported Concat in place. The
// reason names the node, so it is logged whole (and under --trace printed).
void refuse(const Graph& g, PassContext& ctx, const std::string& why) {
  ctx.report.log.push_back("kv_state_refused why=" + why);
  if (ctx.options.kernel.trace && !ctx.options.debug_refusals) fmt::print(stderr, "kv_state_refused why={}\n", why);
  report_refusals(g, ctx, "kv_state", {{why, 1}});
}

bool is_grouped_attention(const Node& n) { return n.op_type == "GroupedAttention" && n.domain == kOneBitDomain; }

bool is_ort_gqa(const Node& n) { return n.op_type == "GroupQueryAttention" && n.domain == "com.microsoft"; }

// The GroupQueryAttention form (above). Returns false when the graph has no
// GQA node reading a named input (the Concat form applies then).
bool keep_gqa_state(Graph& g, PassContext& ctx, const std::set<int>& named,
                    const std::vector<std::vector<int>>& consumers) {
  std::vector<int> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (is_ort_gqa(n) && n.inputs.size() > 4 && (named.count(n.inputs[3]) || named.count(n.inputs[4])))
      nodes.push_back(static_cast<int>(i));
  }
  if (nodes.empty()) return false;
  std::set<int> pasts, presents;
  for (int i : nodes) {
    const Node& n = g.node(i);
    for (int slot : {3, 4}) {
      if (!named.count(n.inputs[static_cast<size_t>(slot)]))
        return refuse(g, ctx, fmt::format("{} input {} is no named KV-cache input", g.node_ref(n), slot)), true;
      if (!pasts.insert(n.inputs[static_cast<size_t>(slot)]).second)
        return refuse(g, ctx, fmt::format("{} shares its past with another node", g.node_ref(n))), true;
    }
    for (size_t o = 1; o < 3; ++o) {
      const int v = o < n.outputs.size() ? n.outputs[o] : -1;
      if (v < 0) continue;
      if (!g.value(v).is_output || !consumers[static_cast<size_t>(v)].empty())
        return refuse(g, ctx, fmt::format("{} output '{}' is read inside the graph", g.node_ref(n), g.value(v).name)),
               true;
      presents.insert(v);
    }
  }
  if (pasts != named) return refuse(g, ctx, "not every KV-cache input is a GroupQueryAttention past"), true;
  for (int p : pasts)
    for (int r : consumers[static_cast<size_t>(p)]) {
      const Node& c = g.node(r);
      if (is_ort_gqa(c) || (c.op_type == "Shape" && c.domain.empty())) continue;
      return refuse(g, ctx, fmt::format("input '{}' is read by {}", g.value(p).name, g.node_ref(c))), true;
    }
  for (int i : nodes) {
    Node& n = g.node(i);
    n.domain = kOneBitDomain;
    n.opset = 1;
    n.outputs.resize(1);
  }
  std::vector<int> outputs;
  for (int o : g.outputs) {
    if (presents.count(o)) g.value(o).is_output = false;
    else outputs.push_back(o);
  }
  g.outputs = outputs;
  g.relink();
  ctx.report.count("kv_state", static_cast<int64_t>(nodes.size()));
  return true;
}

}  // namespace

void keep_kv_state(Graph& g, PassContext& ctx) {
  const SessionOptions& options = ctx.options;
  if (!options.kv_state || options.kv_state_inputs.empty()) return;
  std::set<int> named;
  for (const std::string& name : options.kv_state_inputs) {
    const int v = g.find_value(name);
    if (v < 0 || !is_graph_input(g, v)) return refuse(g, ctx, fmt::format("no graph input '{}'", name));
    named.insert(v);
  }
  // Readers that reach a graph output (the fusions before this pass leave
  // dead nodes behind, e.g. repeat_kv's Unsqueeze).
  const std::vector<bool> live = live_nodes(g);
  std::vector<std::vector<int>> consumers = g.consumers();
  for (auto& list : consumers)
    list.erase(std::remove_if(list.begin(), list.end(), [&](int n) { return !live[static_cast<size_t>(n)]; }),
               list.end());
  auto readers = [&](int v) -> const std::vector<int>& { return consumers[static_cast<size_t>(v)]; };
  if (keep_gqa_state(g, ctx, named, consumers)) return;

  std::vector<Append> appends;
  std::set<int> presents, pasts, matched_nodes, present_casts;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op_type != "Concat" || !n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
    Append a;
    a.concat = static_cast<int>(i);
    if (!match_past(g, n.inputs[0], a) || !named.count(a.past) || axis_attr(n, 4) != 2) continue;
    // The slicing nodes feed only the next of them and this Concat; a Cast
    // this Concat and Shape nodes.
    bool private_chain = true;
    for (int s : a.slicers)
      for (int o : g.node(s).outputs) {
        if (o < 0) continue;
        if (!a.cast) {
          private_chain = private_chain && readers(o).size() == 1;
          continue;
        }
        for (int r : readers(o)) private_chain = private_chain && (r == a.concat || g.node(r).op_type == "Shape");
        private_chain = private_chain && !g.value(o).is_output;
      }
    if (!private_chain) return refuse(g, ctx, fmt::format("{} shares its past slice", g.node_ref(n)));
    // Readers of the result: GqaMatMuls (as K or V) and the way to `present`.
    const int out = n.outputs[0];
    int present = g.value(out).is_output ? out : -1;
    for (int r : readers(out)) {
      const Node& c = g.node(r);
      if (c.op_type == "GqaMatMul" && c.domain == "com.onebit" && input_at(c, 1) == out && c.inputs[0] != out) continue;
      if (is_grouped_attention(c) && (input_at(c, 1) == out) != (input_at(c, 2) == out) && c.inputs[0] != out) continue;
      // Its shape (the repeat's Expand and Reshape targets are computed from it).
      if (c.op_type == "Shape" && c.domain.empty()) continue;
      if (attention_product(g, readers, out, r) >= 0) continue;
      // The cache back in the past's type, as `present`.
      if (a.cast && is_cast(c) && present < 0 && g.value(c.outputs[0]).is_output && readers(c.outputs[0]).empty()) {
        present = c.outputs[0];
        present_casts.insert(r);
        continue;
      }
      if (c.op_type == "Unsqueeze" && c.domain.empty() && c.inputs.size() == 2 && constant_ints_equal(g, c.inputs[1], {0}) &&
          readers(c.outputs[0]).size() == 1 && a.past_axis == 3 && present < 0) {
        const Node& stack = g.node(readers(c.outputs[0])[0]);
        if (stack.op_type == "Concat" && stack.domain.empty() && axis_attr(stack, 5) == 0 &&
            g.value(stack.outputs[0]).is_output) {
          present = stack.outputs[0];
          continue;
        }
      }
      return refuse(g, ctx, fmt::format("{} is read by {}", g.node_ref(n), g.node_ref(c)));
    }
    if (present < 0) return refuse(g, ctx, fmt::format("{} does not reach a graph output", g.node_ref(n)));
    presents.insert(present);
    pasts.insert(a.past);
    matched_nodes.insert(a.concat);
    appends.push_back(a);
  }
  if (appends.empty()) return refuse(g, ctx, "no cache Concat found");
  if (pasts != named) return refuse(g, ctx, "not every KV-cache input feeds a cache Concat");

  // Every present output is made of matched Concats only.
  for (int p : presents) {
    const Node& pn = g.node(g.values[static_cast<size_t>(p)].producer);
    if (matched_nodes.count(g.value(p).producer) || present_casts.count(g.value(p).producer))
      continue;  // per layer: checked above
    // A stack nothing in the graph reads: once it is no output, nothing
    // will read the held caches as dense tensors.
    if (!readers(p).empty())
      return refuse(g, ctx, fmt::format("output '{}' is also read inside the graph",
                                                 g.value(p).name));
    for (int in : pn.inputs) {
      const Node* u = producer_node(g, in);
      if (!u || u->inputs.empty() || !matched_nodes.count(producer_index(g, input_at(*u, 0))))
        return refuse(g, ctx, fmt::format("output '{}' stacks more than the layer caches",
                                                   g.value(p).name));
    }
  }
  // The past inputs feed the matched chains and shape reads only.
  std::set<int> chain_nodes = matched_nodes;
  for (const Append& a : appends) chain_nodes.insert(a.slicers.begin(), a.slicers.end());
  for (int p : pasts)
    for (int r : readers(p)) {
      const Node& c = g.node(r);
      if (chain_nodes.count(r) || (c.op_type == "Shape" && c.domain.empty())) continue;
      return refuse(g, ctx,
                    fmt::format("input '{}' is read by {}", g.value(p).name, g.node_ref(c)));
    }

  // Rewrite.
  for (const Append& a : appends) {
    // Shape(Cast(past)) is Shape(past): the Cast is left to no reader (its
    // past is read for its shape only from now on).
    if (a.cast)
      for (int r : std::vector<int>(readers(g.node(a.slicers[0]).outputs[0])))
        if (g.node(r).op_type == "Shape") g.node(r).inputs[0] = a.past;
    const int out = g.node(a.concat).outputs[0];
    Value stride;
    stride.name = g.unique_name(g.value(out).name + "_head_stride");
    stride.dtype = DType::I64;
    const int stride_v = g.add_value(std::move(stride));
    for (int r : readers(out)) {
      const int mm = attention_product(g, readers, out, r);
      if (mm >= 0) {  // multi-head: the product becomes a GqaMatMul with rep 1
        Node& m = g.node(mm);
        const bool trans_b = mm != r;
        make_onebit_node(m, "GqaMatMul", {m.inputs[0], out, -1, -1, stride_v});
        set_int_attr(m, "transB", trans_b ? 1 : 0);
        continue;
      }
      Node& c = g.node(r);
      if (is_grouped_attention(c)) {  // heads input-10 (key) or input-11 (value) elements apart
        c.inputs.resize(12, -1);
        c.inputs[input_at(c, 1) == out ? 10 : 11] = stride_v;
        continue;
      }
      if (c.op_type != "GqaMatMul") continue;  // the way to `present`, or a Shape
      c.inputs.resize(5, -1);
      c.inputs[4] = stride_v;
    }
    Node& append = g.node(a.concat);
    make_onebit_node(append, "KvAppend", {append.inputs[1], a.past});
    append.attrs = Attributes();
    set_int_attr(append, "past_axis", a.past_axis);
    append.outputs.push_back(stride_v);
    Value& v = g.value(out);
    v.has_shape = false;
    v.dims.clear();
  }
  std::vector<int> outputs;
  for (int o : g.outputs) {
    if (presents.count(o)) g.value(o).is_output = false;
    else outputs.push_back(o);
  }
  g.outputs = outputs;
  g.relink();
  ctx.report.count("kv_state", static_cast<int64_t>(appends.size()));
}

}  // namespace onebit
