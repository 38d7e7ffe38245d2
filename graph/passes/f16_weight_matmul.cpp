// float16 weights under float32 compute:
//
//   W (constant float16 [K, N]) --Cast(to float)--> MatMul(x, ·)
//
// becomes com.onebit::F16wMatMul(x, W) (ops/f16w_matmul.cpp), which keeps W
// float16 and widens it in registers. Without this pass, constant folding
// would turn the Cast into a float32 copy of W: twice the bytes for every
// decode step to read. It runs before folding for that reason. Preconditions:
// W a constant 2-D float16 tensor; the Cast's output read only by MatMuls
// as their B (each becomes its own F16wMatMul; the Cast then goes dead).
//
// A float16 model's MatMul(x, W) with W a constant 2-D float16 tensor (x is
// float16 then, as MatMul's types must agree) becomes F16wMatMul(x, W) too,
// which widens x and rounds its output back to float16; without it, MatMul
// would widen the whole weight every run. The weight may be stored
// transposed (a tied LM head reading the embedding table):
// MatMul(x, Transpose(W [N, K], perm [1, 0])) becomes F16wMatMul(x, W) with
// transB = 1, packed straight from W.
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct F16wGroup {
  int matmul = -1;
  int weight = -1;
  bool trans_b = false;
};

Match<F16wGroup> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[1] < 0) return {};
  const Value& direct = g.value(n.inputs[1]);
  if (direct.constant && direct.constant->dtype() == DType::F16) {
    if (direct.constant->rank() != 2) return Refusal{"weight_rank"};
    return F16wGroup{node, n.inputs[1], false};
  }
  if (const Node* t = producer_op(g, n.inputs[1], "Transpose"); t && input_at(*t, 0) >= 0) {
    const Value& w = g.value(input_at(*t, 0));
    if (!w.constant || w.constant->dtype() != DType::F16) return {};
    if (w.constant->rank() != 2) return Refusal{"weight_rank"};
    if (t->attrs.get_ints("perm", {1, 0}) != std::vector<int64_t>{1, 0}) return Refusal{"perm"};
    return F16wGroup{node, input_at(*t, 0), true};
  }
  const Node* cast = producer_op(g, n.inputs[1], "Cast");
  if (!cast || cast->inputs.empty() || cast->attrs.get_int("to", 0) != static_cast<int64_t>(DType::F32)) return {};
  const Value& w = g.value(cast->inputs[0]);
  if (!w.constant || w.constant->dtype() != DType::F16) return {};
  if (w.constant->rank() != 2) return Refusal{"weight_rank"};
  const Value& x = g.value(n.inputs[0]);
  if (x.dtype != DType::Undefined && x.dtype != DType::F32) return Refusal{"activation_dtype"};
  for (int r : scan.readers[static_cast<size_t>(n.inputs[1])]) {
    const Node& c = g.node(r);
    if (c.op_type != "MatMul" || !c.domain.empty() || c.inputs.size() != 2 || c.inputs[1] != n.inputs[1])
      return Refusal{"cast_read_elsewhere"};
  }
  if (g.value(n.inputs[1]).is_output) return Refusal{"cast_read_elsewhere"};
  return F16wGroup{node, cast->inputs[0], false};
}

}  // namespace

void fuse_f16_weight_matmul(Graph& g, PassContext& ctx) {
  Fusion<F16wGroup> f;
  f.name = "f16w";
  f.match = match;
  f.apply = [](Graph& g, const F16wGroup& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.matmul);
    make_onebit_node(n, "F16wMatMul", {n.inputs[0], m.weight});
    if (m.trans_b) set_int_attr(n, "transB", 1);
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
