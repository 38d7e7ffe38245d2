// q4 fusion (DESIGN.md "Q4NX, weight-only 4-bit"):
//
//   W_q [K,N] int4/uint4 (constant) --DequantizeLinear(scale, zero_point?)--> W
//                                       [--Cast(to float)-->]  (float16 scales)
//   x [..., K] float ------------------------------------------------> MatMul --> y [--Add(bias [N])--> y']
//
// becomes one com.onebit::Q4MatMul(x, W_q, scale, zero_point, bias) that
// packs W_q once into the Q4 GEMM (ops/q4_matmul.cpp); the float weight is
// never made (the DequantizeLinear dies unless something else reads it).
//
// Preconditions (a failure is a refusal with a reason, counted in the pass
// report as q4_refused:<why> and logged under ONEBIT_QDQ_DEBUG=1):
//   - W_q is a constant 2-D int4/uint4 tensor;
//   - the scale is constant float32 or float16; the zero point, if any,
//     constant, of W_q's type and the scale's shape;
//   - scales blocked along K (axis 0, block_size a multiple of 8, at least
//     16: what the GEMM packs), per column (axis 1, [N]) or per tensor.
//     Blocks along N, or one scale per k, put the scale inside the sum over
//     K in a way the GEMM's per-block epilogue cannot express: refused;
//   - float16 scales only through a Cast to float (DequantizeLinear's output
//     has the scale's type, the MatMul is float). The graph then rounds each
//     dequantized weight (q·s) to float16 before the Cast; the fused node
//     multiplies in float32 and skips that rounding (≤ 2⁻¹¹ relative per
//     weight), so it is closer to x·(q·s) than the graph it replaces;
//   - x is float32 (or undeclared);
//   - an Add is folded in as the bias only when it is y's sole reader and
//     its other input is a constant float32 [N].
// The activation precision is not the pass's business: both 4-bit ops read
// it from the session's KernelOptions (ops/q4_matmul.cpp).
#include <fmt/format.h>

#include "base/error.h"
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct Q4Group {
  int matmul = -1, dq = -1, cast = -1, add = -1;
  int bias = -1;            // value id of the folded bias
  int64_t block_size = 0;   // 0: per column or per tensor
};

bool is_4bit(DType t) { return t == DType::I4 || t == DType::U4; }

// A MatMul whose weight is a DequantizeLinear (through a Cast to float) is
// a candidate; an 8-bit one is refused here too (the QDQ pass refused it).
Match<Q4Group> match(const FusionScan& scan, int mm) {
  const Graph& g = scan.g;
  const Node& matmul = g.node(mm);
  if (matmul.op_type != "MatMul" || !matmul.domain.empty() || matmul.inputs.size() != 2 || matmul.inputs[1] < 0)
    return {};
  Q4Group grp;
  grp.matmul = mm;
  int w_value = matmul.inputs[1];  // the dequantized weight
  const Node* dq = producer_node(g, w_value);
  if (dq && dq->op_type == "Cast" && dq->domain.empty()) {
    if (dq->attrs.get_int("to", 0) != static_cast<int64_t>(DType::F32) || dq->inputs.empty()) return {};
    grp.cast = g.value(w_value).producer;
    w_value = input_at(*dq, 0);
    dq = producer_node(g, w_value);
  }
  if (!dq || !is_q_op(*dq, "DequantizeLinear") || dq->inputs.empty() || input_at(*dq, 0) < 0) return {};
  grp.dq = g.value(w_value).producer;

  const DType wt = value_dtype(g, input_at(*dq, 0));
  const Tensor* w = input_constant(g, *dq, 0);
  if (!is_4bit(wt)) {
    // int8/uint8 weights belong to the QDQ pass; one left here was refused there too.
    return wt == DType::I8 || wt == DType::U8 ? Match<Q4Group>(Refusal{"weight_dtype_" + std::string(dtype_name(wt))}) : Match<Q4Group>();
  }
  if (!w) return Refusal{"weight_not_constant"};
  if (w->rank() != 2) return Refusal{"weight_rank"};
  const int64_t k = w->dim(0), n = w->dim(1);

  const Tensor* scale = input_constant(g, *dq, 1);
  if (!scale) return Refusal{"scale_not_constant"};
  if (scale->dtype() != DType::F32 && scale->dtype() != DType::F16) return Refusal{"scale_dtype"};
  if (scale->dtype() == DType::F16 && grp.cast < 0) return Refusal{"float16_output"};
  const bool has_zp = dq->inputs.size() > 2 && input_at(*dq, 2) >= 0;
  const Tensor* zp = has_zp ? input_constant(g, *dq, 2) : nullptr;
  if (has_zp && !zp) return Refusal{"zero_point_not_constant"};
  if (zp && zp->dtype() != w->dtype()) return Refusal{"zero_point_dtype"};
  if (zp && zp->shape() != scale->shape()) return Refusal{"zero_point_shape"};

  const int64_t bs = dq->attrs.get_int("block_size", 0);
  int64_t axis = dq->attrs.get_int("axis", 1);
  if (axis < 0) axis += 2;
  if (bs > 0) {
    if (axis != 0) return Refusal{"blocked_along_n"};
    if (bs < 16 || bs % 8 != 0) return Refusal{"block_size_unsupported"};
    if (scale->shape() != Shape{(k + bs - 1) / bs, n}) return Refusal{"scale_shape"};
    grp.block_size = bs;
  } else if (scale->size() != 1) {
    if (scale->rank() != 1) return Refusal{"scale_shape"};
    if (axis == 0) return Refusal{"scale_per_k"};
    if (axis != 1 || scale->dim(0) != n) return Refusal{"scale_shape"};
  }

  const DType xt = value_dtype(g, matmul.inputs[0]);
  if (xt != DType::F32 && xt != DType::Undefined) return Refusal{"activation_dtype_" + std::string(dtype_name(xt))};

  // An Add of a constant [N] that is y's only reader becomes the bias.
  const int y = matmul.outputs[0];
  const auto& y_readers = scan.readers[static_cast<size_t>(y)];
  if (y_readers.size() == 1 && !g.value(y).is_output) {
    const Node& add = g.node(y_readers[0]);
    if (add.op_type == "Add" && add.domain.empty() && add.inputs.size() == 2) {
      const int other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      const Value* bp = other >= 0 ? &g.value(other) : nullptr;
      if (bp && other != y && bp->constant && bp->constant->dtype() == DType::F32 && bp->constant->rank() == 1 &&
          bp->constant->dim(0) == n) {
        grp.add = y_readers[0];
        grp.bias = other;
      }
    }
  }
  return grp;
}

}  // namespace

void fuse_q4_matmul(Graph& g, PassContext& ctx) {
  Fusion<Q4Group> f;
  f.name = "q4";
  f.enabled = ctx.options.q4_fusion;
  f.disabled_why = "disabled_by_ONEBIT_Q4=0";
  f.match = match;
  // The MatMul becomes the fused node; a folded Add is dropped and its
  // output becomes the fused node's.
  f.apply = [](Graph& g, const Q4Group& grp, std::vector<bool>& drop, std::map<std::string, int64_t>& counts) {
    const Node& dq = g.node(grp.dq);
    Node& mm = g.node(grp.matmul);
    auto in = [](const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; };
    mm.name += "/q4";
    mm.attrs = Attributes();
    make_onebit_node(mm, "Q4MatMul", {mm.inputs[0], in(dq, 0), in(dq, 1), in(dq, 2), grp.bias});
    set_int_attr(mm, "block_size", grp.block_size);
    if (grp.add >= 0) {
      mm.outputs = g.node(grp.add).outputs;
      drop[static_cast<size_t>(grp.add)] = true;
      ++counts["with_bias"];
    }
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
