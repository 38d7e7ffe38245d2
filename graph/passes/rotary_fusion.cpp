// Rotary position embedding as transformers' apply_rotary_pos_emb exports:
//
//   x --Mul(·, cos)-------------------------------------------+
//   x --Slice(0:h, axis -1)---------------------+             +--Add--> y
//   x --Slice(h:, axis -1)--Neg--Concat(neg, lo, axis -1)--Mul(·, sin)--+
//
// (rotate_half(x) = concat(-x[..., h:], x[..., :h])) becomes
// com.onebit::RotaryHalf(x, cos, sin), half = h: seven kernels and five
// intermediates per q and per k become one pass.
#include <cmath>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

// Slice(x, [start], [end], [axis], [1]) with the axis the last one; returns x.
int slice_of_last_axis(const Graph& g, int value, int64_t& start, int64_t& end) {
  const Node* s = producer_op(g, value, "Slice");
  if (!s || s->inputs.size() < 4) return -1;
  const auto b = constant_scalar(g, input_at(*s, 1)), e = constant_scalar(g, input_at(*s, 2));
  if (!b || !e) return -1;
  if (!constant_ints_equal(g, input_at(*s, 3), {-1}) && !constant_ints_equal(g, input_at(*s, 3), {3})) return -1;
  if (s->inputs.size() > 4 && input_at(*s, 4) >= 0 && !constant_ints_equal(g, input_at(*s, 4), {1})) return -1;
  // Bounds past ±9e18 (INT64_MAX as a double, or a file's huge value) are
  // not converted: the end as "to the end", anything else no match.
  if (!(std::abs(*b) < 9e18) || !(*e > -9e18)) return -1;
  start = static_cast<int64_t>(*b);
  end = *e > 9e18 ? INT64_MAX : static_cast<int64_t>(*e);
  return input_at(*s, 0);
}

struct Rotary {
  int node = -1;  // the Add that becomes the fused node
  int x = -1, cos = -1, sin = -1;
  int64_t half = 0;
};

// r = Concat(Neg(x[..., h:]), x[..., :h], axis -1): returns x and h.
bool match_rotate_half(const Graph& g, int r, int& x, int64_t& half) {
  const Node* cat = producer_op(g, r, "Concat");
  if (!cat || cat->inputs.size() != 2) return false;
  const int64_t axis = cat->attrs.get_int("axis", 0);
  if (axis != -1 && axis != 3) return false;
  const Node* neg = producer_op(g, input_at(*cat, 0), "Neg");
  if (!neg) return false;
  int64_t hb, he, lb, le;
  const int x_hi = slice_of_last_axis(g, input_at(*neg, 0), hb, he);
  const int x_lo = slice_of_last_axis(g, input_at(*cat, 1), lb, le);
  if (x_hi < 0 || x_hi != x_lo || lb != 0 || le != hb || hb <= 0 || he < 2 * hb) return false;
  x = x_hi;
  half = hb;
  return true;
}

// Anchored on the final Add; anything short of the whole pattern is not a
// candidate (an Add of two products is common), so there are no refusals.
Match<Rotary> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& add = g.node(node);
  if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2) return {};
  for (int side = 0; side < 2; ++side) {
    const Node* mul_cos = producer_op(g, add.inputs[static_cast<size_t>(side)], "Mul");
    const Node* mul_sin = producer_op(g, add.inputs[static_cast<size_t>(1 - side)], "Mul");
    if (!mul_cos || !mul_sin || mul_cos->inputs.size() != 2 || mul_sin->inputs.size() != 2) continue;
    for (int rs = 0; rs < 2; ++rs) {
      int x;
      int64_t half;
      if (!match_rotate_half(g, mul_sin->inputs[static_cast<size_t>(rs)], x, half)) continue;
      const int cos = other_input(*mul_cos, x);
      if (cos < 0) continue;
      return Rotary{node, x, cos, mul_sin->inputs[static_cast<size_t>(1 - rs)], half};
    }
  }
  return {};
}

}  // namespace

void fuse_rotary(Graph& g, PassContext& ctx) {
  Fusion<Rotary> f;
  f.name = "rotary";
  f.match = match;
  f.apply = [](Graph& g, const Rotary& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.node);
    make_onebit_node(n, "RotaryHalf", {m.x, m.cos, m.sin});
    n.attrs = Attributes();
    set_int_attr(n, "half", m.half);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
