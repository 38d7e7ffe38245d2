// Grouped-query attention products without materialising the repeated K/V.
// transformers' repeat_kv exports as Unsqueeze → Expand → Reshape, which
// copies every KV head `rep` times per layer and step (and K once more for
// its Transpose); at a 1024-token past that is ~1 GB of copies a token for
// Qwen3-0.6B. Both products read the unrepeated tensor instead:
//
//   K [b,kvh,T,d] -Unsqueeze(2)-> -Expand(e)-> -Reshape(r)-> -Transpose(0,1,3,2)-> MatMul(Q, ·)
//       becomes com.onebit::GqaMatMul(Q, K, e, r) transB = 1      -> [b,h,S,T]
//   V [b,kvh,T,d] -Unsqueeze(2)-> -Expand(e)-> -Reshape(r)-> MatMul(P, ·)
//       becomes com.onebit::GqaMatMul(P, V, e, r) transB = 0      -> [b,h,S,d]
//
// The shapes e and r are only known at plan time; the kernel checks there
// that they are a repeat of each KV head (e = [b,kvh,rep,T,d],
// r = [b,kvh·rep,T,d]) and refuses the plan otherwise, naming the shapes.
// When graph/passes/shape_expr.h proves them that for every size (the
// Shape -> Gather -> Concat chains transformers exports), they are left
// out and the repeat is attribute kv_repeat: the chains computing them are
// dead, and no decode step evaluates them again.
// split_attention_products (below) gives opset 23's Attention over such
// chains the same products.
#include <cmath>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"
#include "graph/passes/shape_expr.h"

namespace onebit {

namespace {

struct Repeat {
  int kv = -1, expand_shape = -1, reshape_shape = -1;
  int64_t allowzero = 0;
  int64_t proven = 0;  // the repeat, when the shapes are proven it for every size (else 0)
  std::vector<int> shape_readers;  // Shape nodes of the repeated value to read the cache instead
};

// GqaMatMul(a, the cache, and its repeat: the shapes, or kv_repeat proven).
void make_gqa(Node& n, int a, const Repeat& r, int64_t trans_b, std::map<std::string, int64_t>& counts) {
  if (r.proven > 0) {
    make_onebit_node(n, "GqaMatMul", {a, r.kv});
    n.attrs = Attributes();
    set_int_attr(n, "kv_repeat", r.proven);
    ++counts["repeat_proven"];
  } else {
    make_onebit_node(n, "GqaMatMul", {a, r.kv, r.expand_shape, r.reshape_shape});
    n.attrs = Attributes();
  }
  set_int_attr(n, "transB", trans_b);
  set_int_attr(n, "allowzero", r.allowzero);
}

// value -> Reshape(Expand(Unsqueeze(kv, [2]), e), r): the repeat_kv chain.
bool match_repeat(const Graph& g, int value, Repeat& out) {
  const Node* reshape = producer_op(g, value, "Reshape");
  if (!reshape || reshape->inputs.size() < 2) return false;
  const Node* expand = producer_op(g, input_at(*reshape, 0), "Expand");
  if (!expand || expand->inputs.size() < 2) return false;
  const Node* unsqueeze = producer_op(g, input_at(*expand, 0), "Unsqueeze");
  if (!unsqueeze || unsqueeze->inputs.size() < 2) return false;
  if (!constant_ints_equal(g, input_at(*unsqueeze, 1), {2}) && !constant_ints_equal(g, input_at(*unsqueeze, 1), {-3})) return false;
  out = {input_at(*unsqueeze, 0), input_at(*expand, 1), input_at(*reshape, 1),
         reshape->attrs.get_int("allowzero", 0), 0, {}};
  out.proven = proven_repeat(g, out.kv, out.expand_shape, out.reshape_shape);
  return true;
}

// Shape nodes reading the repeated value `repeated` [b, kvh·rep, T, d] for
// its dims 0, 2 or 3 only (every reader a Gather at such a constant index):
// transformers 4.x slices the mask to the keys' length this way. Those dims
// are the cache's own, so the Shape can read the cache and the repeat chain
// is dead. Exact: the GqaMatMul taking the chain's product checks the
// repeat's shapes each run as the Reshape would (ops/gqa_matmul.cpp), so a
// run where the Reshape would fail still fails.
std::vector<int> cache_dim_reads(const FusionScan& scan, int repeated) {
  const Graph& g = scan.g;
  std::vector<int> out;
  for (int reader : scan.readers[static_cast<size_t>(repeated)]) {
    const Node& shape = g.node(reader);
    if (shape.op_type != "Shape" || !shape.domain.empty() || shape.attrs.has("start") || shape.attrs.has("end") ||
        shape.outputs.size() != 1 || shape.outputs[0] < 0 || g.value(shape.outputs[0]).is_output)
      continue;
    bool dims_of_cache = !scan.readers[static_cast<size_t>(shape.outputs[0])].empty();
    for (int r : scan.readers[static_cast<size_t>(shape.outputs[0])]) {
      const Node& gather = g.node(r);
      const auto i = constant_scalar(g, input_at(gather, 1));
      dims_of_cache = dims_of_cache && gather.op_type == "Gather" && gather.domain.empty() &&
                      gather.inputs.size() == 2 && input_at(gather, 0) == shape.outputs[0] &&
                      gather.attrs.get_int("axis", 0) == 0 && i &&
                      (*i == 0 || *i == 2 || *i == 3 || *i == -4 || *i == -2 || *i == -1);
    }
    if (dims_of_cache) out.push_back(reader);
  }
  return out;
}

struct GqaGroup {
  int node = -1;  // the MatMul
  Repeat rep;
  int64_t trans_b = 0;
};

// A MatMul whose B is a repeat_kv chain (through the K Transpose for
// Q·Kᵀ). A chain behind a Transpose of another permutation is refused.
Match<GqaGroup> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2) return {};
  GqaGroup grp{node, {}, 0};
  if (const Node* t = producer_op(g, n.inputs[1], "Transpose")) {
    if (!match_repeat(g, input_at(*t, 0), grp.rep)) return {};
    if (t->attrs.get_ints("perm", {}) != std::vector<int64_t>{0, 1, 3, 2}) return Refusal{"transpose_perm"};
    grp.trans_b = 1;
  } else if (!match_repeat(g, n.inputs[1], grp.rep)) {
    return {};
  }
  if (grp.rep.proven > 0) {
    const int repeated = grp.trans_b ? input_at(*producer_node(g, n.inputs[1]), 0) : n.inputs[1];
    grp.rep.shape_readers = cache_dim_reads(scan, repeated);
  }
  return grp;
}

}  // namespace

void fuse_gqa_matmul(Graph& g, PassContext& ctx) {
  Fusion<GqaGroup> f;
  f.name = "gqa";
  f.match = match;
  f.apply = [](Graph& g, const GqaGroup& m, std::vector<bool>&, std::map<std::string, int64_t>& counts) {
    Node& n = g.node(m.node);
    make_gqa(n, n.inputs[0], m.rep, m.trans_b, counts);
    for (int shape : m.rep.shape_readers) {
      g.node(shape).inputs[0] = m.rep.kv;
      ++counts["shape_reads_moved"];
    }
  };
  run_fusion(g, ctx, f);
}

namespace {

// ai.onnx Attention (opset 23, what torch.onnx writes for sdpa) over 4-D
// float32 heads, no causal flag, softcap, past or extra outputs:
//
//   Attention(Q, K', V', mask) with K', V' repeat_kv chains (or plain caches)
//     becomes GqaMatMul(Q, K, e, r) transB 1 -> Mul(scale) -> Add(mask)
//             -> Softmax(last axis) -> GqaMatMul(·, V, e, r)
//
// the eager export's products, which the passes after this one keep the
// cache of (kv-state) and hand the mask to (masked-scores). Same formula;
// the scores and softmax are the eager path's kernels, not the Attention
// kernel's, so results agree to rounding, not bit for bit.
struct AttentionParts {
  int node = -1;
  Repeat k, v;  // kv = the cache; the shapes -1 when it is not repeated
  int mask = -1;
  float scale = 0;
};

bool rank4(const Graph& g, int v) { return v >= 0 && g.value(v).has_shape && g.value(v).dims.size() == 4; }

bool cache_of(const Graph& g, int value, Repeat& out) {
  if (match_repeat(g, value, out)) return true;
  out = {value, -1, -1, 0, 0, {}};
  return value >= 0;
}

Match<AttentionParts> match_attention(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "Attention" || !n.domain.empty() || n.opset < 23) return {};
  if (n.inputs.size() < 3 || n.inputs.size() > 4) return Refusal{"attention_inputs"};
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (n.outputs[o] >= 0) return Refusal{"attention_extra_outputs"};
  if (n.attrs.get_int("is_causal", 0) != 0) return Refusal{"attention_causal_flag"};
  if (n.attrs.get_float("softcap", 0.0f) != 0.0f) return Refusal{"attention_softcap"};
  const int q = n.inputs[0], mask = input_at(n, 3);
  AttentionParts parts{node, {}, {}, mask, 0};
  if (!cache_of(g, n.inputs[1], parts.k) || !cache_of(g, n.inputs[2], parts.v)) return Refusal{"attention_inputs"};
  // The query and the caches as declared (a repeat's result is checked by
  // GqaMatMul when planned).
  if (!rank4(g, q) || !rank4(g, parts.k.kv) || !rank4(g, parts.v.kv)) return Refusal{"attention_not_4d"};
  for (int v : {q, parts.k.kv, parts.v.kv, mask})
    if (v >= 0 && g.value(v).dtype != DType::F32) return Refusal{"attention_not_float32"};
  // Attention pads a mask shorter than the keys with −∞; Add would not: the
  // mask's last dim must be declared as the cache's length.
  if (mask >= 0) {
    const Value& mv = g.value(mask);
    if (!mv.has_shape || mv.dims.empty() || !dim_known_equal(g.value(parts.k.kv).dims[2], mv.dims.back()))
      return Refusal{"attention_mask_length_not_known_equal"};
  }
  if (n.attrs.has("scale")) {
    parts.scale = n.attrs.get_float("scale", 0.0f);
  } else {
    const Dim& d = g.value(q).dims[3];
    if (d.value <= 0) return Refusal{"attention_scale_unknown"};
    parts.scale = 1.0f / std::sqrt(static_cast<float>(d.value));  // as the Attention kernel takes it
  }
  // A cache read as it is must have the query's heads: GqaMatMul without
  // the repeat's shapes pairs one query head with each KV head.
  for (const Repeat* r : {&parts.k, &parts.v}) {
    if (r->expand_shape >= 0) continue;
    if (!dim_known_equal(g.value(q).dims[1], g.value(r->kv).dims[1])) return Refusal{"attention_heads_not_known_equal"};
  }
  // The caches, shapes and mask become inputs of nodes placed just before this one.
  for (int v : {parts.k.kv, parts.k.expand_shape, parts.k.reshape_shape, parts.v.kv, parts.v.expand_shape,
                parts.v.reshape_shape, mask})
    if (producer_index(g, v) > node) return Refusal{"attention_input_computed_later"};
  return parts;
}

}  // namespace

void split_attention_products(Graph& g, PassContext& ctx) {
  const std::vector<AttentionParts> found = find_groups<AttentionParts>(g, ctx, "attention_split", match_attention);
  const int64_t opset = g.opsets.count("") ? g.opsets.at("") : 23;
  std::map<std::string, int64_t> counts;
  // From the last back, so the indices of earlier nodes stay valid.
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const AttentionParts& a = *it;
    const std::string base = g.node(a.node).name;
    auto value = [&](const std::string& suffix) {
      Value v;
      v.name = g.unique_name(base + suffix);
      v.dtype = DType::F32;
      return g.add_value(std::move(v));
    };
    auto node = [&](const char* op, const std::string& suffix, std::vector<int> inputs, int out) {
      Node m;
      m.name = g.unique_name(base + suffix);
      m.op_type = op;
      m.opset = opset;
      m.inputs = std::move(inputs);
      m.outputs = {out};
      return m;
    };
    const int scale = add_scalar_constant(g, base + "/scale", a.scale);
    std::vector<Node> before;
    const int scores = value("/scores"), scaled = value("/scaled");
    {  // [b, h, S, T] as declared (both rank 4, checked), for the passes after
      const std::vector<Dim> qd = g.value(g.node(a.node).inputs[0]).dims;
      Value& sv = g.value(scores);
      sv.has_shape = true;
      sv.dims = {qd[0], qd[1], qd[2], g.value(a.k.kv).dims[2]};
    }
    Node qk = node("GqaMatMul", "/qk", {}, scores);
    make_gqa(qk, g.node(a.node).inputs[0], a.k, 1, counts);
    before.push_back(std::move(qk));
    before.push_back(node("Mul", "/scale", {scores, scale}, scaled));
    int logits = scaled;
    if (a.mask >= 0) {
      logits = value("/masked");
      before.push_back(node("Add", "/mask", {scaled, a.mask}, logits));
    }
    const int p = value("/probs");
    Node softmax = node("Softmax", "/softmax", {logits}, p);
    set_int_attr(softmax, "axis", -1);
    before.push_back(std::move(softmax));
    Node& pv = g.node(a.node);
    const int out = pv.outputs[0];
    make_gqa(pv, p, a.v, 0, counts);
    pv.outputs = {out};
    g.nodes.insert(g.nodes.begin() + a.node, std::make_move_iterator(before.begin()),
                   std::make_move_iterator(before.end()));
  }
  if (!found.empty()) g.relink();
  ctx.report.count("attention_split", static_cast<int64_t>(found.size()));
  if (counts["repeat_proven"] > 0) ctx.report.count("attention_split_repeat_proven", counts["repeat_proven"]);
}

}  // namespace onebit
