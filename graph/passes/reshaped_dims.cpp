// A dim read off a Reshape's output that the Reshape's target fixes:
//
//   Gather(Shape(Reshape(x, r)), i)   with r[i] a positive constant for every size
//   Slice(Shape(Reshape(x, r)), [-1], [end])        (x.size(-1): r's last entry)
//
// is that constant. torch.onnx's TorchScript exporter reads rotate_half's
// bounds this way, Div(Gather(Shape(x), 3), 2) with x = Transpose(Reshape(q,
// [b, s, -1, d])) (and a Qwen3 q norm between them): folded, they are
// constants and the rotary fusion takes them. And sdpa's scale when the
// exporter computes it (transformers 4.x), 1/√(q.size(-1)) with q the rotary
// output, or a partial rotary's Concat of the rotated and the passed halves
// (Phi-2): folded, it is the constant the sdpa-scales pass needs. The dim is
// carried from the Reshape to the read through Transposes, norms,
// broadcasts, Slices and Concats (graph/passes/proven_dims.h).
//
// r[i] is read with graph/passes/shape_expr.h: a constant, or a constant
// times a dim a graph input declares as a number. A positive entry of a
// Reshape's target is the output's dim as it is, whatever the other entries
// (-1, 0) do, so the read's result is that number whenever the Reshape
// succeeds.
#include <cmath>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"
#include "graph/passes/proven_dims.h"

namespace onebit {
namespace {

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
  const auto one_int = [&](size_t i) -> std::optional<int64_t> {  // a rank-1 constant of one element
    bool scalar = true;
    const auto ints = constant_int_list(g, input_at(reader, i), 1, &scalar);
    if (!ints || scalar || ints->size() != 1) return std::nullopt;
    return (*ints)[0];
  };
  const auto start = one_int(1), end = one_int(2);
  if (!start || !end) return false;
  if (reader.inputs.size() > 3 && !(one_int(3) == int64_t{0} || one_int(3) == int64_t{-1})) return false;  // axes
  if (reader.inputs.size() > 4 && one_int(4) != int64_t{1}) return false;  // steps
  if (*start == -1 && *end >= (int64_t{1} << 31)) {  // -1 to past any rank: the last dim
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
    const auto dim = proven_dim(g, x, index);
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
