// A graph that computes in bfloat16: a transformers export of a bfloat16
// checkpoint left unconverted, onnxruntime-genai's `-p bf16` build. The
// fusions' kernels take float32 and float16, so such a graph keeps to the
// --basic passes from here on (run_passes reads the count `bf16_unfused`)
// and its ops run in their bfloat16 forms; a note for the user says so and
// names the product that showed it.
//
// The sign is a MatMul or Gemm that reads or writes bfloat16, once
// infer-dtypes has typed the values (or a bfloat16 constant it reads). A
// bfloat16 weight widened by a Cast before its MatMul computes in float32
// and is not one.
#include <fmt/format.h>

#include "graph/passes/match.h"
#include "graph/passes/passes.h"

namespace onebit {

namespace {

// The first such product, or -1.
int bf16_matmul(const Graph& g) {
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (!node.domain.empty() || (node.op_type != "MatMul" && node.op_type != "Gemm")) continue;
    for (const std::vector<int>* values : {&node.inputs, &node.outputs})
      for (int v : *values)
        if (value_dtype(g, v) == DType::BF16) return static_cast<int>(n);
  }
  return -1;
}

}  // namespace

void check_bf16(Graph& g, PassContext& ctx) {
  const int n = bf16_matmul(g);
  if (n < 0) return;
  ctx.report.count("bf16_unfused");
  ctx.report.notes.push_back(fmt::format(
      "{} computes in bfloat16 ({} multiplies bfloat16): its ops run as the file writes them, without the fused "
      "float32 / float16 kernels, so it runs slower than the same model exported in float32 or float16",
      g.path, g.node_ref(g.nodes[static_cast<size_t>(n)])));
}

}  // namespace onebit
