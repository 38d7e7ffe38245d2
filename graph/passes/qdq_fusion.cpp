// QDQ-group fusion (DESIGN.md "Fused A8W8 group"):
//
//   x_q --DequantizeLinear(s_x, zp_x)--> x_dq --+
//                                               +--> MatMul --> y [--QuantizeLinear(s_y, zp_y)--> y_q]
//   w_q --DequantizeLinear(s_w, zp_w)--> w_dq --+
//
// becomes one com.onebit::QDQMatMul node reading x_q and w_q directly; the
// dequantized float tensors are never made (the DequantizeLinear nodes die
// unless something else reads them).
//
// Preconditions (each failure is a refusal with a reason, logged under
// ONEBIT_QDQ_DEBUG=1 and counted in the pass report):
//   - both MatMul inputs come from DequantizeLinear (ai.onnx or com.microsoft);
//   - w_q is a constant 2-D int8/uint8 initializer, x_q is int8/uint8;
//   - scales are constant float32; zero points constant, of the data's type;
//   - x scale per tensor or per row (axis 0 of a 2-D x); w scale per tensor
//     or per column (axis 1). A scale along K weights the products inside
//     the sum and cannot fold into an integer epilogue: refused;
//   - no block_size (blocked scales run along K);
//   - a QuantizeLinear folded in only if it is y's sole reader, per tensor,
//     int8/uint8, with constant scale and zero point.
// Refused groups run node by node, with the same output.
#include <fmt/format.h>

#include <optional>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

bool is_int8(DType t) { return t == DType::I8 || t == DType::U8; }

struct QdqGroup {
  int matmul = -1, dq_x = -1, dq_w = -1, q_y = -1;
  bool x_per_row = false, w_per_column = false;
  DType x_type = DType::Undefined;
};

// Scale layout of one DequantizeLinear: per tensor, or per axis `axis`.
struct ScaleLayout {
  bool per_axis = false;
  int64_t axis = 0;
};

// Checks the scale and zero point of a Q/DQ node; returns the refusal
// reason, or nothing when they fit one of the foldable layouts.
std::optional<std::string> scale_layout(const Graph& g, const Node& q, int64_t data_rank, ScaleLayout& out) {
  const Tensor* scale = input_constant(g, q, 1);
  if (!scale) return "scale_not_constant";
  if (scale->dtype() != DType::F32) return "scale_dtype";
  if (q.inputs.size() > 2 && q.inputs[2] >= 0 && !input_constant(g, q, 2)) return "zero_point_not_constant";
  if (q.attrs.get_int("block_size", 0) > 0) return "blocked";
  if (scale->size() == 1) return std::nullopt;  // per tensor ([] or [1])
  if (scale->rank() != 1) return "scale_shape";
  int64_t axis = q.attrs.get_int("axis", 1);
  if (data_rank < 0) return "unknown_rank";
  if (axis < 0) axis += data_rank;
  out.per_axis = true;
  out.axis = axis;
  return std::nullopt;
}

// A MatMul with a DequantizeLinear on either input is a candidate.
Match<QdqGroup> match(const FusionScan& scan, int mm) {
  const Graph& g = scan.g;
  const Node& matmul = g.node(mm);
  if (matmul.op_type != "MatMul" || !matmul.domain.empty() || matmul.inputs.size() != 2 || matmul.inputs[0] < 0 ||
      matmul.inputs[1] < 0)
    return {};
  const Node* dq_x = producer_node(g, matmul.inputs[0]);
  const Node* dq_w = producer_node(g, matmul.inputs.size() > 1 ? matmul.inputs[1] : -1);
  const bool x_dq = dq_x && is_q_op(*dq_x, "DequantizeLinear");
  const bool w_dq = dq_w && is_q_op(*dq_w, "DequantizeLinear");
  if (!x_dq && !w_dq) return {};  // a float MatMul: not a group
  // 4-bit weights are the W4 pass's (graph/q4_fusion.cpp), not a refused A8W8 group.
  if (w_dq && input_at(*dq_w, 0) >= 0 && dtype_bits(g.value(input_at(*dq_w, 0)).dtype) == 4)
    return {};
  if (!x_dq) return Refusal{"activation_not_dequantized"};
  if (!w_dq) return Refusal{"weight_not_dequantized"};
  if (dq_x->inputs.empty() || input_at(*dq_x, 0) < 0 || dq_w->inputs.empty() || input_at(*dq_w, 0) < 0)
    return Refusal{"missing_input"};

  QdqGroup grp;
  grp.matmul = mm;
  grp.dq_x = g.value(matmul.inputs[0]).producer;
  grp.dq_w = g.value(matmul.inputs[1]).producer;
  const Tensor* w = input_constant(g, *dq_w, 0);
  if (!w) return Refusal{"weight_not_constant"};
  if (w->rank() != 2) return Refusal{"weight_rank"};
  if (!is_int8(w->dtype())) return Refusal{"weight_dtype_" + std::string(dtype_name(w->dtype()))};
  const Value& xq = g.value(input_at(*dq_x, 0));
  DType x_type = xq.dtype;
  if (x_type == DType::Undefined && xq.constant) x_type = xq.constant->dtype();
  if (x_type == DType::Undefined) {
    // The exporter did not declare it: the producer decides (QuantizeLinear's zero point type, default uint8).
    const Node* q = producer_node(g, input_at(*dq_x, 0));
    if (q && is_q_op(*q, "QuantizeLinear")) {
      const Tensor* zp = input_constant(g, *q, 2);
      x_type = zp ? zp->dtype() : static_cast<DType>(q->attrs.get_int("output_dtype", 2));
    }
  }
  if (!is_int8(x_type)) return Refusal{"activation_dtype_" + std::string(dtype_name(x_type))};
  grp.x_type = x_type;

  ScaleLayout ws, xs;
  if (auto why = scale_layout(g, *dq_w, 2, ws)) return Refusal{"weight_" + *why};
  if (ws.per_axis && ws.axis == 0) return Refusal{"weight_scale_along_k"};
  if (ws.per_axis && ws.axis != 1) return Refusal{"weight_scale_axis"};
  grp.w_per_column = ws.per_axis;
  const int64_t x_rank = xq.has_shape ? static_cast<int64_t>(xq.dims.size()) : -1;
  if (auto why = scale_layout(g, *dq_x, x_rank, xs)) return Refusal{"activation_" + *why};
  if (xs.per_axis && xs.axis == x_rank - 1) return Refusal{"activation_scale_along_k"};
  if (xs.per_axis && !(x_rank == 2 && xs.axis == 0)) return Refusal{"activation_scale_axis"};
  grp.x_per_row = xs.per_axis;

  // An optional QuantizeLinear that is y's only reader.
  const int y = matmul.outputs[0];
  const auto& y_readers = scan.readers[static_cast<size_t>(y)];
  if (y_readers.size() == 1 && !g.value(y).is_output) {
    const Node& q = g.node(y_readers[0]);
    ScaleLayout ys;
    const Tensor* zp = input_constant(g, q, 2);
    const DType out_type = zp ? zp->dtype() : static_cast<DType>(q.attrs.get_int("output_dtype", 2));
    if (is_q_op(q, "QuantizeLinear") && q.inputs[0] == y && !scale_layout(g, q, -1, ys) && !ys.per_axis &&
        is_int8(out_type))
      grp.q_y = y_readers[0];
  }
  return grp;
}

}  // namespace

void fuse_qdq_matmul(Graph& g, PassContext& ctx) {
  Fusion<QdqGroup> f;
  f.name = "qdq";
  f.enabled = ctx.options.qdq_fusion;
  f.disabled_why = "disabled_by_ONEBIT_QDQ=0";
  f.match = match;
  // The MatMul becomes the fused node; a folded Q is dropped and its output
  // becomes the fused node's output.
  f.apply = [](Graph& g, const QdqGroup& grp, std::vector<bool>& drop, std::map<std::string, int64_t>& counts) {
    const Node& dq_x = g.node(grp.dq_x);
    const Node& dq_w = g.node(grp.dq_w);
    Node& mm = g.node(grp.matmul);
    auto in = [](const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; };
    Node fused;
    fused.name = mm.name + "/qdq";
    make_onebit_node(fused, "QDQMatMul",
                     {in(dq_x, 0), in(dq_x, 1), in(dq_x, 2), in(dq_w, 0), in(dq_w, 1), in(dq_w, 2), -1, -1});
    fused.outputs = mm.outputs;
    set_int_attr(fused, "x_per_row", grp.x_per_row);
    set_int_attr(fused, "w_per_column", grp.w_per_column);
    set_int_attr(fused, "x_type", static_cast<int64_t>(grp.x_type));
    if (grp.q_y >= 0) {
      const Node& q = g.node(grp.q_y);
      fused.inputs[6] = in(q, 1);
      fused.inputs[7] = in(q, 2);
      fused.outputs = q.outputs;
      set_int_attr(fused, "output_dtype", q.attrs.get_int("output_dtype", 0));
      drop[static_cast<size_t>(grp.q_y)] = true;
      ++counts["with_q"];
    }
    mm = std::move(fused);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
