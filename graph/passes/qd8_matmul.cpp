// --int8: a float MatMul whose weight is a constant 2-D float32 tensor runs
// through the int8 GEMM (DESIGN.md "Dynamic int8 for float graphs"):
//
//   x (float) --> MatMul <-- W (constant float [K, N])
//
// becomes com.onebit::Qd8MatMul(x, W): W quantized per column once at
// create (scale = amax/127), x per row at each call (amax/127),
// C = acc · a_scale[m] · w_scale[n]. Off unless SessionOptions::qd8 (`--int8`).
#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

struct Qd8Group {
  int matmul = -1;
};

// Every MatMul with a constant weight is a candidate.
Match<Qd8Group> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& n = g.node(node);
  if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[0] < 0 || n.inputs[1] < 0)
    return {};
  const Value& w = g.value(n.inputs[1]);
  const Value& x = g.value(n.inputs[0]);
  if (!w.constant) return {};
  if (w.constant->rank() != 2) return Refusal{"weight_rank"};
  if (w.constant->dtype() != DType::F32) return Refusal{"weight_dtype_" + std::string(dtype_name(w.constant->dtype()))};
  if (x.dtype != DType::Undefined && x.dtype != DType::F32)
    return Refusal{"activation_dtype_" + std::string(dtype_name(x.dtype))};
  return Qd8Group{node};
}

}  // namespace

void qd8_matmul(Graph& g, PassContext& ctx) {
  if (!ctx.options.qd8) return;
  Fusion<Qd8Group> f;
  f.name = "qd8";
  f.match = match;
  f.apply = [](Graph& g, const Qd8Group& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.matmul);
    n.op_type = "Qd8MatMul";
    n.domain = kOneBitDomain;
    n.opset = 1;
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
