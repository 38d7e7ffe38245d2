// What a small int64 tensor a graph computes from shapes is, element by
// element, for every input size: each element a constant or a constant
// times one dim of a value. Exporters compute the targets of Expand and
// Reshape this way (Shape -> Gather -> Unsqueeze -> Concat, ...); a fusion
// that proves such a target is "the cache's dims with the KV heads repeated"
// needs no check per step, so the chain computing it can go.
//
// Only the ops and forms below are understood, each at its ONNX semantics;
// anything else (another op, a non-constant index, a comparison whose
// outcome depends on a dim's size) gives no expression, never a guess.
//   constant   an int64 initializer (or folded value) of rank 0 or 1, <= 64 elements
//   Shape      of a value whose rank the caller knows (start / end as opset 15
//              has them), or of an expression (its length, a constant)
//   Gather     axis 0 of a rank-1 expression at constant indices (rank 0 or 1);
//              of Shape(x) with x's rank unknown, at indices >= 0: x's dims
//   Unsqueeze  of a rank-0 expression at axis 0 or -1
//   Reshape    of an expression to [n] or [-1] (rank 1, the same elements)
//   Concat     along axis 0 of rank-1 expressions
//   Mul        of an expression and a constant (broadcast of rank <= 1)
//   ConstantOfShape  of a constant [n] with an int64 value
//   Equal      decided element by element: equal constants, one term twice,
//              or a dim's multiple (k >= 0, so >= 0) against a negative constant
//   Where      with a decided condition
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace onebit {

// One element: k when of < 0, else k · dim `axis` of value `of`.
struct ShapeTerm {
  int of = -1;
  int64_t axis = 0;
  int64_t k = 0;
  bool operator==(const ShapeTerm&) const = default;
};

struct ShapeExpr {
  bool boolean = false;  // an Equal's result (k is 0 or 1); else int64
  bool scalar = false;   // rank 0 (one term); else rank 1
  std::vector<ShapeTerm> terms;
};

// The rank of value v when the caller knows it (the fused kernel checks it
// at plan time), else -1.
using RankOf = std::function<int64_t(int value)>;

std::optional<ShapeExpr> shape_expr(const Graph& g, int value, const RankOf& rank_of);

// Convenience for matchers: dim `axis` of `of` times k, and a constant.
inline ShapeTerm dim_term(int of, int64_t axis, int64_t k = 1) { return {of, axis, k}; }
inline ShapeTerm constant_term(int64_t k) { return {-1, 0, k}; }

// repeat_kv's Expand and Reshape targets over a rank-4 cache [b, kvh, T, d]
// (the fused kernel checks the rank): the repeat rep >= 1 when `expand` is
// [b, kvh, rep, T, d] and `reshape` [b, kvh·rep, T, d] of the cache's dims
// for every size, else 0.
int64_t proven_repeat(const Graph& g, int cache, int expand, int reshape);

}  // namespace onebit
