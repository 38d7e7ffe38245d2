// A weight stored transposed (a tied lm_head reading the embedding table):
//
//   W [N, K] (constant) --Transpose(perm [1, 0])--> W^T --> MatMul(x, W^T)
//
// becomes com.onebit::MatMul(x, W) with transB = 1, which packs W^T straight
// from W. Folding the Transpose instead would keep a second copy of the
// table (600 MB for Qwen3-0.6B) beside the packed one. Runs before constant
// folding; the Transpose dies when nothing else reads it.
#include "graph/fusions.h"
#include "ops/registry.h"

namespace onebit {

void fuse_matmul_transpose(Graph& g, const SessionOptions&, PassReport& report, ThreadPool&) {
  int64_t fused = 0;
  for (Node& n : g.nodes) {
    if (n.op_type != "MatMul" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[1] < 0) continue;
    const int p = g.values[static_cast<size_t>(n.inputs[1])].producer;
    if (p < 0) continue;
    const Node& t = g.nodes[static_cast<size_t>(p)];
    if (t.op_type != "Transpose" || !t.domain.empty() || t.inputs.empty() || t.inputs[0] < 0) continue;
    const Value& w = g.values[static_cast<size_t>(t.inputs[0])];
    if (!w.constant || w.constant->rank() != 2 || w.constant->dtype() != DType::F32) continue;
    const std::vector<int64_t> perm = t.attrs.get_ints("perm", {1, 0});
    if (perm != std::vector<int64_t>{1, 0}) continue;
    n.inputs[1] = t.inputs[0];
    n.domain = kOneBitDomain;
    n.opset = 1;
    Attribute a;
    a.kind = Attribute::Kind::Int;
    a.i = 1;
    n.attrs.set("transB", a);
    ++fused;
  }
  if (fused) g.relink();
  report.count("matmul_transpose", fused);
}

}  // namespace onebit
