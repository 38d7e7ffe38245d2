// A dim read off a Reshape's output that the Reshape's target fixes:
//
//   Gather(Shape(Reshape(x, r)), i)   with r[i] a positive constant for every size
//   Slice(Shape(Reshape(x, r)), [-1], [end])        (x.size(-1): r's last entry)
//
// is that constant. torch.onnx's TorchScript exporter reads the head size of
// sdpa's output this way from the repeated values (the repeat_kv chain's
// Reshape), which kept that chain, and with it a copy of every layer's value
// cache, alive after the GQA fusion had taken its product; with the dim a
// constant the chain is dead and the kv-state pass can keep the cache in the
// session. It also reads rotate_half's bounds, Div(Gather(Shape(x), 3), 2),
// with x = Transpose(Reshape(q, [b, s, -1, d])) (and a Qwen3 q norm
// between them): folded, they are constants and the rotary fusion takes them.
// And sdpa's scale when the exporter computes it, 1/√(q.size(-1)) with q the
// rotary output: folded, it is the constant the sdpa-scales pass needs.
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
// v behind Transposes (axis moved through each perm), fused RMS norms (x's
// shape: the q and k norms of Qwen3) and, for an axis counted from the back,
// elementwise Add, Sub, Mul and Div (the rotary embedding's q·cos +
// rotate_half(q)·sin, whose last dim sdpa's scale reads when the file does
// not state it): a dim d of one operand is the output's dim whenever the
// broadcast succeeds, unless d is 1, so `broadcast` is set and the caller
// refuses a 1. `axis` is updated to the Reshape's output's axis. A
// Transpose must state its perm (the default reversal needs a rank the file
// may declare wrongly), and `rank` is set to the perms' length (-1 without
// one): the Reshape's target must have it.
struct Walk {
  int64_t axis = 0;
  int64_t rank = -1;
  bool broadcast = false;
};

const Node* reshape_behind(const Graph& g, int v, Walk& w, int hops = 0) {
  for (; hops < 12 && v >= 0; ++hops) {
    const Node* p = producer_node(g, v);
    if (!p) return nullptr;
    if (p->domain == kOneBitDomain && p->op_type == "RmsNorm" && !p->inputs.empty()) {  // x's shape
      v = p->inputs[0];
      continue;
    }
    if (!p->domain.empty()) return nullptr;
    if (p->op_type == "Reshape") return p;
    const bool binary = p->op_type == "Add" || p->op_type == "Sub" || p->op_type == "Mul" || p->op_type == "Div";
    if (binary) {
      // Ranks may differ across a broadcast: only an axis from the back
      // names the same dim on both sides, and no perm seen so far binds.
      if (w.axis >= 0 || w.rank >= 0 || p->inputs.size() != 2) return nullptr;
      for (int side = 0; side < 2; ++side) {
        Walk branch{w.axis, -1, true};
        if (const Node* r = reshape_behind(g, p->inputs[static_cast<size_t>(side)], branch, hops + 1)) {
          w = branch;
          return r;
        }
      }
      return nullptr;
    }
    if (p->op_type != "Transpose" || p->inputs.empty()) return nullptr;
    const std::vector<int64_t> perm = p->attrs.get_ints("perm", {});
    const auto n = static_cast<int64_t>(perm.size());
    if (n == 0 || (w.rank >= 0 && n != w.rank) || !is_permutation(perm)) return nullptr;
    w.rank = n;
    if (w.axis < 0) w.axis += n;
    if (w.axis < 0 || w.axis >= n) return nullptr;
    w.axis = perm[static_cast<size_t>(w.axis)];
    v = p->inputs[0];
  }
  return nullptr;
}

// The dim of Shape(x) that `reader` takes, when it takes exactly one:
// Gather(Shape(x), i) (i a constant of rank <= 1) or Slice(Shape(x), [i],
// [i + 1]) with i >= 0, or Slice(Shape(x), [-1], [past the end]), the last
// dim (torch.onnx's x.size(-1)). Sets the Shape's input and the index.
bool one_dim_of_shape(const Graph& g, const Node& reader, int& x, int64_t& index) {
  if (!reader.domain.empty() || reader.outputs.size() != 1 || reader.outputs[0] < 0 || reader.inputs.empty())
    return false;
  const Node* shape = producer_op(g, reader.inputs[0], "Shape");
  if (!shape || shape->attrs.has("start") || shape->attrs.has("end") || shape->inputs.empty()) return false;
  x = shape->inputs[0];
  if (reader.op_type == "Gather") {
    if (reader.inputs.size() != 2 || reader.attrs.get_int("axis", 0) != 0) return false;
    const Tensor* t = input_constant(g, reader, 1);
    const auto i = constant_scalar(g, reader.inputs[1]);
    if (!t || !i || t->rank() > 1 || !dtype_is_integer(t->dtype())) return false;
    if (!(std::abs(*i) <= 64)) return false;  // a dim index: a huge one (which a double may not even hold) is no dim
    index = static_cast<int64_t>(*i);
    return true;
  }
  if (reader.op_type != "Slice" || reader.inputs.size() < 3 || reader.inputs.size() > 5) return false;
  const auto one_int = [&](size_t i) -> std::optional<int64_t> {
    const Tensor* t = input_constant(g, reader, i);
    if (!t || t->rank() != 1 || t->size() != 1 || !dtype_is_integer(t->dtype()) || !t->raw()) return std::nullopt;
    return tensor_to_ints(*t)[0];
  };
  const auto start = one_int(1), end = one_int(2);
  if (!start || !end) return false;
  if (reader.inputs.size() > 3 && !(one_int(3) == int64_t{0} || one_int(3) == int64_t{-1})) return false;  // axes
  if (reader.inputs.size() > 4 && one_int(4) != int64_t{1}) return false;  // steps
  if (*start == -1 && *end >= 64) {  // -1 to past any rank: the last dim
    index = -1;
    return true;
  }
  if (*start < 0 || *start > 64 || *end != *start + 1) return false;
  index = *start;
  return true;
}

}  // namespace

void read_reshaped_dims(Graph& g, PassContext& ctx) {
  std::vector<bool> drop(g.nodes.size(), false);
  int64_t found = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& reader = g.nodes[n];
    int x = -1;
    int64_t index = 0;
    if (!one_dim_of_shape(g, reader, x, index) || g.value(reader.outputs[0]).is_output) continue;
    Walk w{index, -1, false};
    const Node* reshape = reshape_behind(g, x, w);
    if (!reshape || reshape->inputs.size() < 2) continue;
    const auto dim = fixed_entry(g, reshape->inputs[1], w.axis, w.rank);
    if (!dim || (w.broadcast && *dim == 1)) continue;
    // Gather's index shape ([] or [1]); a Slice yields [1].
    const Tensor* gather_index = reader.op_type == "Gather" ? input_constant(g, reader, 1) : nullptr;
    Tensor t = Tensor::allocate(DType::I64, gather_index ? gather_index->shape() : Shape{1});
    *t.data<int64_t>() = *dim;
    Value& v = g.value(reader.outputs[0]);
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
