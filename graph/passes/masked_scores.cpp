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
// equal). A float32 graph that does not declare the mask's shape (torch.onnx's
// TorchScript exporter declares none inside the graph) is fused too, with
// the attribute mask_any_shape = 1, when its Softmax's axis is -1 (the last
// of any rank): the kernel takes the fast path when the mask it is given
// is rows over the scores, and else computes the chain as its nodes would.
// The Where(IsNaN(P), 0, P) that exporter writes after the Softmax (a row
// masked whole gives NaNs) is taken too (nan_to_zero = 1), P read by those
// two nodes alone and the 0 a +0 scalar of P's type.
#include <algorithm>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

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
    if (t != DType::F32 || softmax.attrs.get_int("axis", softmax.opset >= 13 ? -1 : 1) != -1)
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
