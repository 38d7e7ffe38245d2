// --int8: a float MatMul whose weight is a constant 2-D float32 tensor runs
// through the int8 GEMM (DESIGN.md "Dynamic int8 for float graphs"):
//
//   x (float) --> MatMul <-- W (constant float [K, N])
//
// becomes com.onebit::DynInt8MatMul(x, W): W quantized per column once at
// create (scale = amax/127), x per row at each call (amax/127),
// C = acc · a_scale[m] · w_scale[n]. Off unless options.int8.
#include "graph/fusions.h"
#include "ops/registry.h"

namespace onebit {

void int8_dynamic_matmul(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool&) {
  if (!options.int8) return;
  int64_t rewritten = 0;
  for (Node& n : g.nodes) {
    if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[1] < 0) continue;
    const Value& w = g.values[static_cast<size_t>(n.inputs[1])];
    const Value& x = g.values[static_cast<size_t>(n.inputs[0])];
    if (!w.constant || w.constant->rank() != 2 || w.constant->dtype() != DType::F32) continue;
    if (x.dtype != DType::Undefined && x.dtype != DType::F32) continue;
    n.op_type = "DynInt8MatMul";
    n.domain = kOneBitDomain;
    n.opset = 1;
    ++rewritten;
  }
  report.count("int8_dynamic", rewritten);
}

}  // namespace onebit
