// Dims of a value proven for every size from the Reshape targets and
// weights that fix them (graph/passes/proven_dims.h).
#include "graph/passes/proven_dims.h"

#include <algorithm>
#include <string>
#include <vector>

#include "graph/passes/match.h"
#include "graph/passes/shape_expr.h"

namespace onebit {
namespace {

// r[i] as a positive number, if shape_expr proves it one; r of `entries`
// entries when that is >= 0. Only a graph input's declared rank and dims
// count: the session checks those against every run's inputs, where a
// declaration inside the graph or on an output is never checked.
std::optional<int64_t> fixed_entry(const Graph& g, int target, int64_t i, int64_t entries) {
  const RankOf rank = [&](int v) -> int64_t {
    const Value& val = g.value(v);
    return val.is_input && val.has_shape ? static_cast<int64_t>(val.dims.size()) : -1;
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
    if (!of.is_input || !of.has_shape || t.axis < 0 || t.axis >= static_cast<int64_t>(of.dims.size()))
      return std::nullopt;
    const int64_t d = of.dims[static_cast<size_t>(t.axis)].value;
    if (d < 0 || t.k < 1 || t.k > (int64_t{1} << 40) || d > (int64_t{1} << 20)) return std::nullopt;
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

// The ints of input i of `n` when they are one rank-1 list for every size:
// a constant, or computed from constants only (graph/passes/shape_expr.h:
// Unsqueeze(d) of a dim this pass has just read, before folding).
std::optional<std::vector<int64_t>> constant_ints(const Graph& g, const Node& n, size_t i) {
  const int v = input_at(n, i);
  if (v < 0) return std::nullopt;
  if (g.value(v).constant) {
    bool scalar = false;
    auto ints = constant_int_list(g, v, 64, &scalar);
    return scalar ? std::nullopt : ints;
  }
  const auto e = shape_expr(g, v, [](int) -> int64_t { return -1; });
  if (!e || e->boolean || e->scalar) return std::nullopt;
  std::vector<int64_t> ints;
  for (const ShapeTerm& t : e->terms) {
    if (t.of >= 0) return std::nullopt;
    ints.push_back(t.k);
  }
  return ints;
}

constexpr int64_t kLargestDim = int64_t{1} << 40;
// Nodes one proof may visit: a Concat or a broadcast visits all its inputs,
// so a crafted chain of them could otherwise take exponential time.
constexpr int kProofSteps = 512;

// Elementwise ops of one input: the output's shape is the input's.
bool keeps_shape(const Node& n) {
  static const char* const kOps[] = {"Identity", "Cast", "Neg", "Abs", "Cos", "Sin", "Sqrt", "Reciprocal",
                                     "Exp", "Sigmoid", "Tanh", "Relu", "Erf"};
  if (!n.domain.empty() || n.inputs.size() != 1) return false;
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* op) { return n.op_type == op; });
}

// Unsqueeze's axes when they are constant and none is negative (a negative
// one counts from the back of an output whose rank may not be known).
std::optional<std::vector<int64_t>> unsqueeze_axes(const Graph& g, const Node& p) {
  std::vector<int64_t> axes;
  if (p.inputs.size() == 2) {
    const Tensor* t = input_constant(g, p, 1);
    if (!t || t->rank() > 1 || !dtype_is_integer(t->dtype()) || !t->raw() || t->size() > 64) return std::nullopt;
    axes = tensor_to_ints(*t);
  } else if (p.inputs.size() == 1) {
    axes = p.attrs.get_ints("axes", {});  // before opset 13
  } else {
    return std::nullopt;
  }
  if (axes.empty()) return std::nullopt;
  for (int64_t a : axes)
    if (a < 0 || a > 64) return std::nullopt;
  return axes;
}

// The rank of value v where it is fixed: a constant's, a graph input's as
// declared (the session checks it), a Transpose's perm length, and through
// Slices, Concats, fused RMS norms and one-input elementwise ops (which keep
// their input's rank) and Unsqueeze (its axes added); else -1.
int64_t proven_rank(const Graph& g, int v, int depth = 0) {
  if (depth > 24 || v < 0) return -1;
  const Value& val = g.value(v);
  if (val.constant) return val.constant->rank();
  if (val.is_input) return val.has_shape ? static_cast<int64_t>(val.dims.size()) : -1;
  const Node* p = producer_node(g, v);
  if (!p || p->inputs.empty()) return -1;
  if (p->domain == kOneBitDomain && p->op_type == "RmsNorm") return proven_rank(g, p->inputs[0], depth + 1);
  if (!p->domain.empty()) return -1;
  if (p->op_type == "Transpose") {
    const std::vector<int64_t> perm = p->attrs.get_ints("perm", {});
    return !perm.empty() && is_permutation(perm) ? static_cast<int64_t>(perm.size()) : -1;
  }
  if (p->op_type == "Slice" || p->op_type == "Concat" || keeps_shape(*p))
    return proven_rank(g, p->inputs[0], depth + 1);
  if (p->op_type == "Unsqueeze") {
    const auto axes = unsqueeze_axes(g, *p);
    const int64_t r = axes ? proven_rank(g, p->inputs[0], depth + 1) : -1;
    return r < 0 ? -1 : r + static_cast<int64_t>(axes->size());
  }
  return -1;
}

// A lower bound of v's rank: its proven rank, else through Expand (its
// output has at least its input's rank) and the ops proven_rank reads.
int64_t least_rank(const Graph& g, int v, int depth = 0) {
  const int64_t r = proven_rank(g, v);
  if (r >= 0 || depth > 24 || v < 0) return r;
  const Node* p = producer_node(g, v);
  if (!p || p->inputs.empty() || !p->domain.empty()) return -1;
  if (p->op_type == "Expand" || keeps_shape(*p)) return least_rank(g, p->inputs[0], depth + 1);
  return -1;
}

std::optional<int64_t> dim_within(const Graph& g, int v, int64_t axis, int64_t rank, int depth, int& budget) {
  if (depth > 24 || v < 0 || --budget < 0) return std::nullopt;
  if (const std::optional<Tensor>& c = g.value(v).constant) {  // a constant's own dims
    const int64_t r = c->rank();
    const int64_t a = axis < 0 ? axis + r : axis;
    if ((rank >= 0 && rank != r) || a < 0 || a >= r) return std::nullopt;
    return c->shape()[static_cast<size_t>(a)];
  }
  const Node* p = producer_node(g, v);
  if (!p) return std::nullopt;
  if (p->domain == kOneBitDomain && p->op_type == "RmsNorm" && !p->inputs.empty())
    return dim_within(g, p->inputs[0], axis, rank, depth + 1, budget);
  // A KV state (KvAppend's cache [1, kvh, P+S, d], ops/kv_append.cpp): its
  // batch is 1, its heads and head size the new positions' (rank 4, checked).
  if (p->domain == kOneBitDomain && p->op_type == "KvAppend" && !p->inputs.empty() && !p->outputs.empty() &&
      p->outputs[0] == v) {
    const int64_t a = axis < 0 ? axis + 4 : axis;
    if ((rank >= 0 && rank != 4) || a < 0 || a > 3 || a == 2) return std::nullopt;
    if (a == 0) return 1;
    return dim_within(g, p->inputs[0], a, 4, depth + 1, budget);
  }
  // The last dim of a weight-only product: MatMulNBits' N, a float16
  // weight's [K, N] (or [N, K] with transB) as F16wMatMul keeps it.
  const bool last = axis == -1 || (rank >= 0 && axis == rank - 1);
  if (p->domain == kMicrosoftDomain && p->op_type == "MatMulNBits") {
    const int64_t n = p->attrs.get_int("N", 0);
    return last && n >= 1 && n <= kLargestDim ? std::optional<int64_t>(n) : std::nullopt;
  }
  if (p->domain == kOneBitDomain && p->op_type == "F16wMatMul") {
    const Tensor* w = input_constant(g, *p, 1);
    if (!w || w->rank() != 2) return std::nullopt;
    const int64_t n = w->shape()[p->attrs.get_int("transB", 0) != 0 ? 0 : 1];
    return last && n >= 1 && n <= kLargestDim ? std::optional<int64_t>(n) : std::nullopt;
  }
  if (!p->domain.empty() || p->inputs.empty()) return std::nullopt;
  const std::string& op = p->op_type;
  if (op == "Reshape") {
    if (p->inputs.size() < 2) return std::nullopt;
    return fixed_entry(g, p->inputs[1], axis, rank);
  }
  if (keeps_shape(*p)) return dim_within(g, p->inputs[0], axis, rank, depth + 1, budget);
  if (op == "MatMul") {
    // With both operands of rank >= 2 the product's last dim is B's last
    // and the one before it A's (the batch dims before them broadcast).
    // With B of rank >= 2 alone its last dim is still the product's (A of
    // rank 1 drops A's row dim, not B's columns).
    if (p->inputs.size() != 2) return std::nullopt;
    const int64_t a = axis < 0 ? axis : rank >= 0 ? axis - rank : 0;
    if (a != -1 && a != -2) return std::nullopt;
    if (least_rank(g, p->inputs[1]) < 2 || (a == -2 && least_rank(g, p->inputs[0]) < 2)) return std::nullopt;
    const auto n = dim_within(g, p->inputs[a == -1 ? 1 : 0], a, -1, depth + 1, budget);
    return n && *n >= 1 && *n <= kLargestDim ? n : std::nullopt;
  }
  if (op == "Unsqueeze") {
    // An inserted axis is 1; another is the input's axis before the inserts.
    const auto axes = unsqueeze_axes(g, *p);
    if (!axes || axis < 0) return std::nullopt;
    int64_t below = 0;
    for (int64_t u : *axes) {
      if (u == axis) return 1;
      below += u < axis;
    }
    const int64_t in_rank = rank >= 0 ? rank - static_cast<int64_t>(axes->size()) : -1;
    return dim_within(g, p->inputs[0], axis - below, in_rank, depth + 1, budget);
  }
  if (op == "Expand") {
    // The output's dim, from the back, is the input's whenever the
    // broadcast succeeds, unless that is 1 (the shape's entry then rules).
    if (p->inputs.size() != 2) return std::nullopt;
    const int64_t a = axis < 0 ? axis : rank >= 0 ? axis - rank : 0;
    if (a >= 0) return std::nullopt;
    const auto d = dim_within(g, p->inputs[0], a, -1, depth + 1, budget);
    return d && *d != 1 ? d : std::nullopt;
  }
  if (op == "Transpose") {
    const std::vector<int64_t> perm = p->attrs.get_ints("perm", {});
    const auto n = static_cast<int64_t>(perm.size());
    if (n == 0 || (rank >= 0 && n != rank) || !is_permutation(perm)) return std::nullopt;
    const int64_t a = axis < 0 ? axis + n : axis;
    if (a < 0 || a >= n) return std::nullopt;
    return dim_within(g, p->inputs[0], perm[static_cast<size_t>(a)], n, depth + 1, budget);
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    if (p->inputs.size() != 2) return std::nullopt;
    // A scalar constant on one side leaves the other side's shape as it is.
    for (int side = 0; side < 2; ++side) {
      const Tensor* c = input_constant(g, *p, static_cast<size_t>(side));
      if (c && c->rank() == 0) return dim_within(g, p->inputs[static_cast<size_t>(1 - side)], axis, rank, depth + 1, budget);
    }
    // Ranks may differ across a broadcast: only an axis from the back names
    // the same dim on both sides.
    if (axis >= 0) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const auto d = dim_within(g, p->inputs[static_cast<size_t>(side)], axis, -1, depth + 1, budget);
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
        const auto d = dim_within(g, in, axis, rank, depth + 1, budget);
        if (!d || *d > kLargestDim - sum) return std::nullopt;
        sum += *d;
      }
      return sum;
    }
    // Another axis: every input has the output's dim, or the Concat fails.
    // Which one it is only a known rank or both axes on one side can say.
    if (rank < 0 && (axis < 0) != (along < 0)) return std::nullopt;
    return dim_within(g, p->inputs[0], axis, rank, depth + 1, budget);
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
    const auto d = dim_within(g, p->inputs[0], axis, rank, depth + 1, budget);
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

}  // namespace

std::optional<int64_t> proven_dim(const Graph& g, int v, int64_t axis) {
  int budget = kProofSteps;
  return dim_within(g, v, axis, -1, 0, budget);
}

}  // namespace onebit
