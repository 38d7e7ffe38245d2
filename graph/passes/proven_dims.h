// Dims of a value proven for every size: where a Reshape's target or a
// constant weight fixes them, carried through the ops between. The
// reshaped-dims pass reads Shape dims with it (sdpa's scale, rotate_half's
// bounds, a chunk's halves); the SwiGLU fusion proves two Slices equal.
#pragma once

#include <cstdint>
#include <optional>

#include "graph/graph.h"

namespace onebit {

// Dim `axis` of value v (counted from the back when negative) as a number for every size the graph runs at,
// read where it is fixed:
//   - a Reshape's target entry that graph/passes/shape_expr.h proves a
//     positive number (a constant, or a multiple of a graph input's declared
//     dim, which the session checks each run);
//   - a constant's own dims;
//   - the last dim of MatMulNBits (its N) and of F16wMatMul (its float16
//     weight's);
// and carried through:
//   - MatMul: its last dim is B's and, A of rank >= 2 too, the one before
//     it A's, when B's rank is proven >= 2 (cos's width in transformers:
//     inv_freq expanded times the positions);
//   - a KV state (KvAppend): batch 1, its heads and head size the new
//     positions' (a cache's Shape read each step, TorchScript exports);
//   - fused RMS norms (x's shape: the q and k norms of Qwen3) and one-input
//     elementwise ops (Cast, Cos, Sin, Neg, ...);
//   - Transposes that state a valid perm (the default reversal needs a rank
//     the file may declare wrongly), whose length is then the rank;
//   - Unsqueeze with constant axes >= 0, for an axis from the front (an
//     inserted axis is 1);
//   - elementwise Add, Sub, Mul and Div: with a scalar constant operand the
//     other's dim; else, for an axis from the back, an operand's dim is the
//     output's whenever the broadcast succeeds, unless it is 1 (the rotary
//     embedding's q·cos + rotate_half(q)·sin); Expand's input the same;
//   - Concat: the sum of the inputs' dims along its axis, any input's dim
//     along another (partial rotary: the rotated and the passed halves);
//   - Slice with bounds constant for every size (computed from constants
//     too: a dim just read) and step 1, as ONNX clamps them.
// "Whenever the graph runs": a node whose shapes disagree fails as it would
// have; the number is never a guess about a run that succeeds.
// A proof visits at most 512 nodes (a crafted chain of Concats would
// otherwise take exponential time); past that, no number.
std::optional<int64_t> proven_dim(const Graph& g, int v, int64_t axis);

}  // namespace onebit
