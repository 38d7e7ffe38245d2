// Hands attention's mask to the scores product, so a prompt's causal half
// is not computed. transformers' eager attention exports as
//
//   GqaMatMul(Q, K) transB = 1 -> Mul(·, s) -> Add(·, mask) -> Softmax(last axis) -> P
//
// (the GQA fusion wrote the GqaMatMul). Where that chain is all that reads
// each intermediate, the mask becomes the GqaMatMul's input 5 and s its
// attribute `score_scale`; the Mul, Add and Softmax stay as they are. The
// kernel (ops/gqa_matmul.cpp) may then leave out the trailing masked run of
// a row and write 0 there, when it can show that Softmax's output does not
// change by a bit: the left-out scores are bounded by |q|·|k|·|s|, too small
// to lift a masked score near the row's maximum.
//
// A second fusion, `fuse-scores-softmax`, then makes such a GqaMatMul the
// whole chain (attribute softmax = 1; the Mul, Add and Softmax dropped):
// the kernel applies ·s, + mask and the Softmax row while each block of
// scores is in cache, instead of three more passes over [b,h,S,T] in
// memory. It needs what makes the output shape the scores' own: s a scalar,
// the scores, s and mask all declared float32 or all float16 (a float16
// export: the kernel rounds to float16 after each node, as they do), and the
// mask's declared dims each 1 or known equal to the scores' (its keys dim
// equal). A graph that does not declare the mask's shape (torch.onnx's
// TorchScript exporter declares none inside the graph; an Optimum export
// converted to float16) is fused too, with
// the attribute mask_any_shape = 1, when its Softmax's axis is -1 (the last
// of any rank): the kernel takes the fast path when the mask it is given
// is rows over the scores, and else computes the chain as its nodes would.
// The Where(IsNaN(P), 0, P) that exporter writes after the Softmax (a row
// masked whole gives NaNs) is taken too (nan_to_zero = 1), P read by those
// two nodes alone and the 0 a +0 scalar of P's type.
//
// A third, `cut-mask-to-keys`, takes the Slice transformers 4.x writes in
// every layer, causal_mask[:, :, :, :key_states.shape[-2]], into such a
// GqaMatMul (mask_to_keys = 1, mask_keys_axis = its axis): the one mask
// of the whole graph becomes every layer's input 5, and the Slice and the
// Shape -> Gather -> Unsqueeze that computed its bound each decode step
// go. It needs the bound proven the keys' count (dim 2 of the GqaMatMul's
// KV input, graph/passes/shape_expr.h) for every size, the start 0, one
// constant axis and step 1; and, with a declared mask (no
// mask_any_shape), the cut on its last axis, so rows stay rows.
// transformers 4.53 cuts a boolean mask and turns it into the float one in
// each layer, Where(cut, 0, -inf): the Where then reads the mask before the
// cut (a Where of scalar branches is elementwise, so it commutes with the
// Slice), and the layers' Wheres, now alike, are merged into one by
// merge-duplicate-nodes.
#include <algorithm>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"
#include "graph/passes/shape_expr.h"

namespace onebit {

namespace {

// The chain GqaMatMul -> Mul(s) -> Add(mask) -> Softmax over the keys,
// every intermediate read by the next node alone.
struct ScoresChain {
  int node = -1;  // the GqaMatMul
  int mul = -1, add = -1, softmax = -1;
  int mask = -1;
  int scale = -1;  // the constant s, a value
  float s = 0;
  int isnan = -1, where = -1;  // Where(IsNaN(P), 0, P) after the Softmax, or -1
  bool any_shape = false;      // the mask's fit is checked when planned (mask_any_shape)
};

// The Softmax axis is the last one of a rank-4 input: -1 or 3, or the
// default of opset 13 and later (-1; earlier opsets flatten from axis 1).
bool softmax_over_last(const Node& softmax) {
  const int64_t axis = softmax.attrs.get_int("axis", softmax.opset >= 13 ? -1 : 1);
  return axis == -1 || axis == 3;
}

// The chain from the scores on, wherever its mask is computed.
Match<ScoresChain> find_chain(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  const int scores = n.outputs[0];
  const auto& r0 = scan.readers[static_cast<size_t>(scores)];
  if (r0.size() != 1) return {};
  const Node& mul = g.node(r0[0]);
  if (mul.op_type != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 || mul.outputs.size() != 1) return {};
  ScoresChain c;
  c.node = node;
  c.mul = r0[0];
  c.scale = other_input(mul, scores);
  const std::optional<double> s = constant_scalar(g, c.scale);
  if (!s) return Refusal{"scale_not_a_constant_scalar"};
  if (!(std::abs(*s) < 1e30)) return Refusal{"scale_not_finite"};
  c.s = static_cast<float>(*s);
  if (!only_reader(scan, scores, c.mul)) return Refusal{"scores_read_elsewhere"};
  const int scaled = mul.outputs[0];
  const auto& r1 = scan.readers[static_cast<size_t>(scaled)];
  if (r1.size() != 1 || !only_reader(scan, scaled, r1[0])) return Refusal{"scaled_read_elsewhere"};
  c.add = r1[0];
  const Node& add = g.node(c.add);
  if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2 || add.outputs.size() != 1)
    return Refusal{"no_mask_add"};
  c.mask = other_input(add, scaled);
  if (c.mask < 0) return Refusal{"no_mask_add"};
  const int masked = add.outputs[0];
  const auto& r2 = scan.readers[static_cast<size_t>(masked)];
  if (r2.size() != 1 || !only_reader(scan, masked, r2[0])) return Refusal{"masked_read_elsewhere"};
  c.softmax = r2[0];
  const Node& softmax = g.node(c.softmax);
  if (softmax.op_type != "Softmax" || !softmax.domain.empty() || softmax.inputs.size() != 1 ||
      softmax.outputs.size() != 1)
    return Refusal{"no_softmax"};
  if (!softmax_over_last(softmax)) return Refusal{"softmax_not_over_keys"};
  return c;
}

// The chain, its mask computed before the scores: it becomes their input.
Match<ScoresChain> walk_chain(const FusionScan& scan, int node) {
  Match<ScoresChain> m = find_chain(scan, node);
  if (const ScoresChain* c = m.group(); c && producer_index(scan.g, c->mask) > node)
    return Refusal{"mask_computed_later"};
  return m;
}

bool is_scores(const Node& n) {
  return n.op_type == "GqaMatMul" && n.domain == kOneBitDomain && n.attrs.get_int("transB", 0) == 1 &&
         n.outputs.size() == 1 && n.outputs[0] >= 0;
}

// Scores not yet given a mask.
bool wants_mask(const Node& n) { return is_scores(n) && (n.inputs.size() < 6 || n.inputs[5] < 0); }

Match<ScoresChain> match_mask(const FusionScan& scan, int node) {
  if (!wants_mask(scan.g.node(node))) return {};
  return walk_chain(scan, node);
}

// Whether `mask` (declared) can only broadcast into `scores` (declared,
// rank 4) without widening them, its keys dim the scores' own: the
// fused kernel reads it as rows (ops/gqa_matmul.cpp MaskRows).
bool mask_fits_rows(const Value& mask, const Value& scores) {
  if (!mask.has_shape || !scores.has_shape || scores.dims.size() != 4 || mask.dims.empty() || mask.dims.size() > 4)
    return false;
  const size_t rank = mask.dims.size();
  for (size_t i = 0; i < rank; ++i) {
    const Dim& m = mask.dims[rank - 1 - i];
    const Dim& y = scores.dims[4 - 1 - i];
    if (!dim_known_equal(m, y) && (i == 0 || m.value != 1)) return false;
  }
  return true;
}

// Where(IsNaN(P), zero, P) with P the Softmax's output read by those two
// nodes alone and zero a +0 of P's type with at most one element and rank
// (so the Where's output is P's shape): recorded in c.
void find_nan_to_zero(const FusionScan& scan, ScoresChain& c) {
  const Graph& g = scan.g;
  const int p = g.node(c.softmax).outputs[0];
  const auto& readers = scan.readers[static_cast<size_t>(p)];
  if (g.value(p).is_output || readers.size() != 2) return;
  for (int i = 0; i < 2; ++i) {
    const Node& isnan = g.node(readers[static_cast<size_t>(i)]);
    if (isnan.op_type != "IsNaN" || !isnan.domain.empty() || isnan.inputs.size() != 1 || isnan.outputs.size() != 1)
      continue;
    const int w = readers[static_cast<size_t>(1 - i)];
    const Node& where = g.node(w);
    if (where.op_type != "Where" || !where.domain.empty() || where.inputs.size() != 3 || where.outputs.size() != 1 ||
        where.inputs[0] != isnan.outputs[0] || where.inputs[2] != p || !only_reader(scan, isnan.outputs[0], w))
      return;
    const Tensor* zero = input_constant(g, where, 1);
    if (!zero || !zero->raw() || zero->dtype() != g.value(p).dtype || zero->size() != 1 || zero->rank() > 1)
      return;
    const auto* bytes = static_cast<const unsigned char*>(zero->raw());
    if (std::any_of(bytes, bytes + zero->bytes(), [](unsigned char x) { return x != 0; })) return;  // +0 only
    c.isnan = readers[static_cast<size_t>(i)];
    c.where = w;
    return;
  }
}

Match<ScoresChain> match_softmax(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (!is_scores(n) || n.inputs.size() < 6 || n.inputs[5] < 0 || n.attrs.get_int("softmax", 0) != 0) return {};
  Match<ScoresChain> m = walk_chain(scan, node);
  const ScoresChain* c = m.group();
  if (!c) return m;
  if (c->mask != n.inputs[5]) return Refusal{"another_mask"};
  const Value& scores = g.value(n.outputs[0]);
  const Value& mask = g.value(c->mask);
  const Tensor& s = *g.value(c->scale).constant;
  // float32 throughout, or a float16 export's float16 throughout (each
  // node of the chain rounding to float16, which the kernel repeats).
  const DType t = scores.dtype;
  if (t != DType::F32 && t != DType::F16) return Refusal{"not_declared_float32_or_float16"};
  if (s.dtype() != t || s.rank() > 4) return Refusal{"scale_not_the_scores_dtype_of_rank_4"};
  if (mask.dtype != t) return Refusal{"mask_not_the_scores_dtype"};
  ScoresChain chain = *c;
  if (!mask_fits_rows(mask, scores)) {
    const Node& softmax = g.node(c->softmax);
    if (softmax.attrs.get_int("axis", softmax.opset >= 13 ? -1 : 1) != -1)
      return Refusal{"mask_not_known_to_fit_the_scores"};
    chain.any_shape = true;
  }
  find_nan_to_zero(scan, chain);
  return chain;
}

}  // namespace

namespace {

// The scores' mask must exist before the GqaMatMul that takes it. torch.onnx's
// TorchScript exporter computes each layer's mask (a Where over the one
// boolean mask) between the scores product and the Add, and a file
// re-sorted by a tool (onnxruntime's quantizers) may put the whole chain
// that computes it there (the Slice to the keys' length, its bound read off
// the cache's shape). The nodes after the product that the mask depends on,
// when none of them depends on the product, move to just before it in
// their order: every node still comes after what it reads. At most
// kHoistNodes a mask.
constexpr size_t kHoistNodes = 256;

void hoist_masks(Graph& g, PassContext& ctx) {
  const auto readers = g.consumers();
  const FusionScan scan{g, readers};
  std::vector<std::vector<int>> before(g.nodes.size());  // node -> the nodes that move in front of it
  std::vector<bool> moved(g.nodes.size(), false);
  int64_t hoisted = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (!wants_mask(g.nodes[n])) continue;
    const Match<ScoresChain> m = find_chain(scan, static_cast<int>(n));
    const int p = m.group() ? producer_index(g, m.group()->mask) : -1;
    if (p <= static_cast<int>(n) || moved[static_cast<size_t>(p)]) continue;
    // The mask's producers after n (those moved already stand before an
    // earlier product), found walking up from the mask; none may be n.
    std::vector<int> cone{p}, todo{p};
    std::vector<bool> seen(g.nodes.size(), false);
    seen[static_cast<size_t>(p)] = true;
    bool ready = true;
    while (!todo.empty() && ready) {
      const int q = todo.back();
      todo.pop_back();
      for (int v : g.node(q).inputs) {
        const int r = producer_index(g, v);
        if (r < static_cast<int>(n) || seen[static_cast<size_t>(r)] || moved[static_cast<size_t>(r)]) continue;
        if (r == static_cast<int>(n) || cone.size() >= kHoistNodes) {
          ready = false;
          break;
        }
        seen[static_cast<size_t>(r)] = true;
        cone.push_back(r);
        todo.push_back(r);
      }
    }
    if (!ready) continue;
    std::sort(cone.begin(), cone.end());
    for (int q : cone) moved[static_cast<size_t>(q)] = true;
    hoisted += static_cast<int64_t>(cone.size());
    before[n] = std::move(cone);
  }
  if (hoisted == 0) return;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (moved[n]) continue;
    for (int q : before[n]) nodes.push_back(std::move(g.nodes[static_cast<size_t>(q)]));
    nodes.push_back(std::move(g.nodes[n]));
  }
  g.nodes = std::move(nodes);
  g.relink();
  ctx.report.count("mask_nodes_hoisted", hoisted);
}

}  // namespace

void give_scores_their_mask(Graph& g, PassContext& ctx) {
  hoist_masks(g, ctx);
  Fusion<ScoresChain> f;
  f.name = "masked_scores";
  f.match = match_mask;
  f.apply = [](Graph& g, const ScoresChain& c, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(c.node);
    if (n.inputs.size() < 6) n.inputs.resize(6, -1);
    n.inputs[5] = c.mask;
    set_float_attr(n, "score_scale", c.s);
  };
  run_fusion(g, ctx, f);
}

void fuse_scores_softmax(Graph& g, PassContext& ctx) {
  Fusion<ScoresChain> f;
  f.name = "scores_softmax";
  f.match = match_softmax;
  f.apply = [](Graph& g, const ScoresChain& c, std::vector<bool>& drop, std::map<std::string, int64_t>&) {
    Node& n = g.node(c.node);
    n.outputs[0] = g.node(c.where >= 0 ? c.where : c.softmax).outputs[0];
    set_int_attr(n, "softmax", 1);
    if (c.any_shape) set_int_attr(n, "mask_any_shape", 1);
    if (c.where >= 0) set_int_attr(n, "nan_to_zero", 1);
    for (int d : {c.mul, c.add, c.softmax, c.isnan, c.where})
      if (d >= 0) drop[static_cast<size_t>(d)] = true;
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit

namespace onebit {

namespace {

// A fused chain's mask that is a Slice of another along one axis from 0 to
// the keys' count.
struct MaskCut {
  int node = -1;   // the GqaMatMul
  int slice = -1;  // the Slice
  int64_t axis = -1;
  int where = -1;  // Where(the cut, x, y) between them, or -1
};

// Where(c, x, y) of scalar constants x and y (one element, rank <= 1): of
// c's shape, each element from c's alone.
bool scalar_where(const Graph& g, const Node& w) {
  if (w.op_type != "Where" || !w.domain.empty() || w.inputs.size() != 3 || w.outputs.size() != 1 || w.inputs[0] < 0)
    return false;
  for (size_t i : {1, 2}) {
    const Tensor* c = input_constant(g, w, i);
    if (!c || c->size() != 1 || c->rank() > 1) return false;
  }
  return true;
}

Match<MaskCut> match_mask_cut(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (!is_scores(n) || n.attrs.get_int("softmax", 0) != 1 || n.inputs.size() < 6 || n.inputs[5] < 0 ||
      n.attrs.get_int("mask_to_keys", 0) != 0)
    return {};
  int cut = n.inputs[5];
  int where = -1;
  if (const int w = producer_index(g, cut); w >= 0 && scalar_where(g, g.node(w))) {
    if (!only_reader(scan, cut, node)) return Refusal{"cut_mask_read_elsewhere"};
    where = w;
    cut = g.node(w).inputs[0];
  }
  const int s = producer_index(g, cut);
  if (s < 0) return {};
  const Node& slice = g.node(s);
  // Opset 10 on: starts, ends, axes and steps are inputs.
  if (slice.op_type != "Slice" || !slice.domain.empty() || slice.opset < 10 || slice.inputs.size() < 4 ||
      slice.outputs.size() != 1 || slice.inputs[0] < 0)
    return {};
  if (!only_reader(scan, cut, where >= 0 ? where : node)) return Refusal{"cut_mask_read_elsewhere"};
  if (!constant_ints_equal(g, slice.inputs[1], {0})) return Refusal{"cut_not_from_0"};
  const auto axes = constant_int_list(g, slice.inputs[3], 1);
  if (!axes || axes->size() != 1) return Refusal{"cut_axes_not_one_constant"};
  if (slice.inputs.size() > 4 && slice.inputs[4] >= 0 && !constant_ints_equal(g, slice.inputs[4], {1}))
    return Refusal{"cut_step_not_1"};
  const int kv = n.inputs[1];
  const auto ends = shape_expr(g, slice.inputs[2], [kv](int v) -> int64_t { return v == kv ? 4 : -1; });
  if (!ends || ends->boolean || ends->scalar || ends->terms.size() != 1 || !(ends->terms[0] == dim_term(kv, 2)))
    return Refusal{"cut_not_to_the_keys"};
  MaskCut c{node, s, (*axes)[0], where};
  if (n.attrs.get_int("mask_any_shape", 0) == 0) {
    const Value& out = g.value(n.inputs[5]);
    const int64_t rank = out.has_shape ? static_cast<int64_t>(out.dims.size()) : -1;
    if (c.axis != -1 && (rank < 1 || c.axis != rank - 1)) return Refusal{"declared_mask_cut_elsewhere"};
  }
  return c;
}

}  // namespace

void cut_mask_to_keys(Graph& g, PassContext& ctx) {
  Fusion<MaskCut> f;
  f.name = "mask_cut";
  f.match = match_mask_cut;
  f.apply = [](Graph& g, const MaskCut& c, std::vector<bool>& drop, std::map<std::string, int64_t>&) {
    Node& n = g.node(c.node);
    const int uncut = g.node(c.slice).inputs[0];
    if (c.where >= 0) {
      // The Where now makes the mask before the cut: its declared shape, if
      // any, was the cut's.
      Node& where = g.node(c.where);
      where.inputs[0] = uncut;
      g.value(where.outputs[0]).has_shape = false;
      g.value(where.outputs[0]).dims.clear();
    } else {
      n.inputs[5] = uncut;
    }
    set_int_attr(n, "mask_to_keys", 1);
    set_int_attr(n, "mask_keys_axis", c.axis);
    drop[static_cast<size_t>(c.slice)] = true;
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
