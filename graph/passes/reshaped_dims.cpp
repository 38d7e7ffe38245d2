// A dim read off a Reshape's output that the Reshape's target fixes:
//
//   Gather(Shape(Reshape(x, r)), i)   with r[i] a positive constant for every size
//
// is that constant. torch.onnx's TorchScript exporter reads the head size of
// sdpa's output this way from the repeated values (the repeat_kv chain's
// Reshape), which kept that chain, and with it a copy of every layer's value
// cache, alive after the GQA fusion had taken its product; with the dim a
// constant the chain is dead and the kv-state pass can keep the cache in the
// session. It also reads rotate_half's bounds, Div(Gather(Shape(x), 3), 2),
// with x = Transpose(Reshape(q, [b, s, -1, d])) (and a Qwen3 q norm
// between them): folded, they are constants and the rotary fusion takes them.
//
// r[i] is read with graph/passes/shape_expr.h: a constant, or a constant
// times a dim of a value whose declared dim is a number (the graph's present
// outputs declare their head size). A positive entry of a Reshape's target is
// the output's dim as it is, whatever the other entries (-1, 0) do, so the
// Gather's result is that number whenever the Reshape succeeds; when it would
// fail, the product that read the Reshape checks the repeat's shapes itself
// (GqaMatMul, when planned).
#include <cmath>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"
#include "graph/passes/shape_expr.h"

namespace onebit {
namespace {

// r[i] as a positive number, if shape_expr proves it one; r of `entries`
// entries when that is >= 0.
std::optional<int64_t> fixed_entry(const Graph& g, int target, int64_t i, int64_t entries) {
  const RankOf rank = [&](int v) -> int64_t {
    const Value& val = g.value(v);
    return val.has_shape ? static_cast<int64_t>(val.dims.size()) : -1;
  };
  const auto e = shape_expr(g, target, rank);
  if (!e || e->boolean || e->scalar) return std::nullopt;
  const int64_t n = static_cast<int64_t>(e->terms.size());
  if (entries >= 0 && n != entries) return std::nullopt;
  if (i < 0) i += n;
  if (i < 0 || i >= n) return std::nullopt;
  const ShapeTerm& t = e->terms[static_cast<size_t>(i)];
  int64_t v = t.k;
  if (t.of >= 0) {
    const Value& of = g.value(t.of);
    if (!of.has_shape || t.axis < 0 || t.axis >= static_cast<int64_t>(of.dims.size())) return std::nullopt;
    const int64_t d = of.dims[static_cast<size_t>(t.axis)].value;
    if (d < 0 || t.k > (int64_t{1} << 40) || d > (int64_t{1} << 20)) return std::nullopt;
    v = t.k * d;
  }
  if (v < 1) return std::nullopt;
  return v;
}

bool is_permutation(const std::vector<int64_t>& perm) {
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)]) return false;
    seen[static_cast<size_t>(p)] = true;
  }
  return true;
}

// The Reshape whose output's dim `axis` value v's dim `axis` is: v itself, or
// v behind Transposes (axis moved through each perm) and fused RMS norms
// (x's shape: the q and k norms of Qwen3); `axis` is updated to the
// Reshape's output's axis. A Transpose must state its perm (the default
// reversal needs a rank the file may declare wrongly), and `rank` is set to
// the perms' length (-1 without one): the Reshape's target must have it.
const Node* reshape_behind(const Graph& g, int v, int64_t& axis, int64_t& rank) {
  rank = -1;
  for (int hops = 0; hops < 8 && v >= 0; ++hops) {
    const Node* p = producer_node(g, v);
    if (!p) return nullptr;
    if (p->domain == kOneBitDomain && p->op_type == "RmsNorm" && !p->inputs.empty()) {  // x's shape
      v = p->inputs[0];
      continue;
    }
    if (!p->domain.empty()) return nullptr;
    if (p->op_type == "Reshape") return p;
    if (p->op_type != "Transpose" || p->inputs.empty()) return nullptr;
    const std::vector<int64_t> perm = p->attrs.get_ints("perm", {});
    const auto n = static_cast<int64_t>(perm.size());
    if (n == 0 || (rank >= 0 && n != rank) || !is_permutation(perm)) return nullptr;
    rank = n;
    if (axis < 0) axis += n;
    if (axis < 0 || axis >= n) return nullptr;
    axis = perm[static_cast<size_t>(axis)];
    v = p->inputs[0];
  }
  return nullptr;
}

}  // namespace

void read_reshaped_dims(Graph& g, PassContext& ctx) {
  std::vector<bool> drop(g.nodes.size(), false);
  int64_t found = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& gather = g.nodes[n];
    if (gather.op_type != "Gather" || !gather.domain.empty() || gather.inputs.size() != 2 ||
        gather.outputs.size() != 1 || gather.outputs[0] < 0 || gather.attrs.get_int("axis", 0) != 0)
      continue;
    const Value& out = g.value(gather.outputs[0]);
    const Tensor* index = input_constant(g, gather, 1);
    const auto i = constant_scalar(g, gather.inputs[1]);
    if (out.is_output || !index || !i || index->rank() > 1 || !dtype_is_integer(index->dtype())) continue;
    if (!(std::abs(*i) <= 64)) continue;  // a dim index: a huge one (which a double may not even hold) is no dim
    const Node* shape = producer_op(g, gather.inputs[0], "Shape");
    if (!shape || shape->attrs.has("start") || shape->attrs.has("end")) continue;
    int64_t axis = static_cast<int64_t>(*i), rank = -1;
    const Node* reshape = reshape_behind(g, input_at(*shape, 0), axis, rank);
    if (!reshape || reshape->inputs.size() < 2) continue;
    const auto dim = fixed_entry(g, reshape->inputs[1], axis, rank);
    if (!dim) continue;
    Tensor t = Tensor::allocate(DType::I64, index->shape());
    *t.data<int64_t>() = *dim;
    Value& v = g.value(gather.outputs[0]);
    v.constant = std::move(t);
    v.dtype = DType::I64;
    drop[n] = true;
    ++found;
  }
  if (found == 0) return;
  drop_nodes(g, drop);
  ctx.report.count("reshaped_dims_read", found);
}

}  // namespace onebit
