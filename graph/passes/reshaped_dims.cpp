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
// And sdpa's scale when the exporter computes it (transformers 4.x), 1/√(q.size(-1))
// with q the rotary output, or a partial rotary's Concat of the rotated and
// the passed halves (Phi-2): folded, it is the constant the sdpa-scales pass
// needs. The dim is carried from the Reshape to the read through Transposes,
// norms, broadcasts, Slices and Concats (proven_dim below).
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

// Two axes of one value the same axis: equal, or one from the front and one
// from the back of a value whose rank is known (-1: not known).
bool same_axis(int64_t a, int64_t b, int64_t rank) {
  if ((a < 0) == (b < 0)) return a == b;
  if (rank < 0) return false;
  return (a < 0 ? a + rank : a) == (b < 0 ? b + rank : b);
}

// The ints of a constant input of `n`, if it is one of rank 1.
std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const Node& n, size_t i) {
  const Tensor* t = input_constant(g, n, i);
  if (!t || t->rank() != 1 || !dtype_is_integer(t->dtype()) || !t->raw() || t->size() > 64) return std::nullopt;
  return tensor_to_ints(*t);
}

constexpr int64_t kLargestDim = int64_t{1} << 40;

// The rank of value v where its producers fix it: a Transpose's perm
// length, through Slices, Concats and fused RMS norms (which keep their
// input's rank); else -1.
int64_t proven_rank(const Graph& g, int v, int depth = 0) {
  const Node* p = depth > 24 || v < 0 ? nullptr : producer_node(g, v);
  if (!p || p->inputs.empty()) return -1;
  if (p->domain == kOneBitDomain && p->op_type == "RmsNorm") return proven_rank(g, p->inputs[0], depth + 1);
  if (!p->domain.empty()) return -1;
  if (p->op_type == "Transpose") {
    const std::vector<int64_t> perm = p->attrs.get_ints("perm", {});
    return !perm.empty() && is_permutation(perm) ? static_cast<int64_t>(perm.size()) : -1;
  }
  if (p->op_type == "Slice" || p->op_type == "Concat") return proven_rank(g, p->inputs[0], depth + 1);
  return -1;
}

// Dim `axis` of value v (counted from the back when negative; `rank` is v's
// rank when known, else -1) as a number for every size, read where a
// Reshape's target fixes it (fixed_entry) and carried through:
//   - fused RMS norms (x's shape: the q and k norms of Qwen3);
//   - Transposes that state a valid perm (the default reversal needs a rank
//     the file may declare wrongly), whose length is then the rank;
//   - for an axis from the back, elementwise Add, Sub, Mul and Div: an
//     operand's dim is the output's whenever the broadcast succeeds, unless
//     it is 1 (the rotary embedding's q·cos + rotate_half(q)·sin);
//   - Concat: the sum of the inputs' dims along its axis, any input's dim
//     along another (partial rotary: the rotated and the passed halves);
//   - Slice with constant bounds and step 1, as ONNX clamps them.
// sdpa's 1/√(q.size(-1)) reads q's last dim through all of these.
std::optional<int64_t> proven_dim(const Graph& g, int v, int64_t axis, int64_t rank, int depth = 0) {
  if (depth > 24 || v < 0) return std::nullopt;
  const Node* p = producer_node(g, v);
  if (!p) return std::nullopt;
  if (p->domain == kOneBitDomain && p->op_type == "RmsNorm" && !p->inputs.empty())
    return proven_dim(g, p->inputs[0], axis, rank, depth + 1);
  if (!p->domain.empty() || p->inputs.empty()) return std::nullopt;
  const std::string& op = p->op_type;
  if (op == "Reshape") {
    if (p->inputs.size() < 2) return std::nullopt;
    return fixed_entry(g, p->inputs[1], axis, rank);
  }
  if (op == "Transpose") {
    const std::vector<int64_t> perm = p->attrs.get_ints("perm", {});
    const auto n = static_cast<int64_t>(perm.size());
    if (n == 0 || (rank >= 0 && n != rank) || !is_permutation(perm)) return std::nullopt;
    const int64_t a = axis < 0 ? axis + n : axis;
    if (a < 0 || a >= n) return std::nullopt;
    return proven_dim(g, p->inputs[0], perm[static_cast<size_t>(a)], n, depth + 1);
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    // Ranks may differ across a broadcast: only an axis from the back names
    // the same dim on both sides.
    if (axis >= 0 || p->inputs.size() != 2) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const auto d = proven_dim(g, p->inputs[static_cast<size_t>(side)], axis, -1, depth + 1);
      if (d && *d != 1) return d;
    }
    return std::nullopt;
  }
  if ((op == "Concat" || op == "Slice") && rank < 0) rank = proven_rank(g, v, depth);
  if (op == "Concat") {
    const int64_t along = p->attrs.get_int("axis", 0);
    if (same_axis(axis, along, rank)) {
      int64_t sum = 0;
      for (int in : p->inputs) {
        const auto d = proven_dim(g, in, axis, rank, depth + 1);
        if (!d || *d > kLargestDim) return std::nullopt;
        sum += *d;
      }
      return sum > kLargestDim ? std::nullopt : std::optional<int64_t>(sum);
    }
    // Another axis: every input has the output's dim, or the Concat fails.
    // Which one it is only a known rank or both axes on one side can say.
    if (rank < 0 && (axis < 0) != (along < 0)) return std::nullopt;
    return proven_dim(g, p->inputs[0], axis, rank, depth + 1);
  }
  if (op == "Slice") {
    const auto starts = constant_ints(g, *p, 1), ends = constant_ints(g, *p, 2);
    if (!starts || !ends || starts->size() != ends->size()) return std::nullopt;
    std::vector<int64_t> axes(starts->size());
    for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
    if (p->inputs.size() > 3 && input_at(*p, 3) >= 0) {
      const auto a = constant_ints(g, *p, 3);
      if (!a || a->size() != starts->size()) return std::nullopt;
      axes = *a;
    }
    if (p->inputs.size() > 4 && input_at(*p, 4) >= 0) {
      const auto steps = constant_ints(g, *p, 4);
      if (!steps || steps->size() != starts->size()) return std::nullopt;
      for (int64_t step : *steps)
        if (step != 1) return std::nullopt;
    }
    std::optional<size_t> entry;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (same_axis(axis, axes[i], rank)) entry = i;
      else if (rank < 0 && (axis < 0) != (axes[i] < 0)) return std::nullopt;  // cannot tell
    }
    const auto d = proven_dim(g, p->inputs[0], axis, rank, depth + 1);
    if (!d || !entry) return d;
    // ONNX's clamping, step 1: a negative bound counts from the end.
    const auto clamp = [&](int64_t b) {
      if (b < 0) b = b < -*d ? 0 : b + *d;
      return std::min(b, *d);
    };
    return std::max<int64_t>(0, clamp((*ends)[*entry]) - clamp((*starts)[*entry]));
  }
  return std::nullopt;
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
    const auto dim = proven_dim(g, x, index, -1);
    if (!dim || *dim < 1) continue;
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
