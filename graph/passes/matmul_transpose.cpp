// A weight stored transposed (a tied lm_head reading the embedding table):
//
//   W [N, K] (constant) --Transpose(perm [1, 0])--> W^T --> MatMul(x, W^T)
//
// becomes com.onebit::MatMul(x, W) with transB = 1, which packs W^T straight
// from W. Folding the Transpose instead would keep a second copy of the
// table (600 MB for Qwen3-0.6B) beside the packed one. Runs before constant
// folding; the Transpose dies when nothing else reads it.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct TransposedWeight {
  int matmul = -1, weight = -1;  // the MatMul and W, the Transpose's input
};

// A MatMul whose B is a Transpose: a candidate; it fuses when the Transpose
// swaps the two axes of a constant 2-D float32 weight.
Match<TransposedWeight> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[1] < 0) return {};
  const Node* t = producer_op(g, n.inputs[1], "Transpose");
  if (!t || t->inputs.empty() || input_at(*t, 0) < 0) return {};
  const Value& w = g.value(input_at(*t, 0));
  if (!w.constant) return {};  // an activation transposed (attention's Kᵀ): not this pass's
  if (w.constant->rank() != 2) return Refusal{"weight_rank"};
  if (w.constant->dtype() == DType::F16) return {};  // graph/passes/f16_weight_matmul.cpp's
  if (w.constant->dtype() != DType::F32) return Refusal{"weight_dtype_" + std::string(dtype_name(w.constant->dtype()))};
  if (t->attrs.get_ints("perm", {1, 0}) != std::vector<int64_t>{1, 0}) return Refusal{"perm"};
  return TransposedWeight{node, input_at(*t, 0)};
}

}  // namespace

void fuse_matmul_transpose(Graph& g, PassContext& ctx) {
  Fusion<TransposedWeight> f;
  f.name = "matmul_transpose";
  f.match = match;
  f.apply = [](Graph& g, const TransposedWeight& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.matmul);
    n.inputs[1] = m.weight;
    n.domain = kOneBitDomain;
    n.opset = 1;
    set_int_attr(n, "transB", 1);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
