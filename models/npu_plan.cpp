#include "models/npu_plan.h"

namespace onebit {

namespace {

// The route and (K, N) of a fused integer GEMM node, or false.
bool gemm_of(const Graph& g, const Node& n, npu::Route& route, int64_t& k, int64_t& nn) {
  auto weight_dims = [&](size_t input) {
    if (input >= n.inputs.size() || n.inputs[input] < 0) return false;
    const Value& w = g.value(n.inputs[input]);
    if (!w.constant || w.constant->rank() != 2) return false;
    k = w.constant->dim(0);
    nn = w.constant->dim(1);
    return true;
  };
  if (n.domain == kOneBitDomain && n.op_type == "QDQMatMul") {
    route = npu::Route::kQdq;
    return weight_dims(3);
  }
  if (n.domain == kOneBitDomain && n.op_type == "Qd8MatMul") {
    route = npu::Route::kQd8;
    return weight_dims(1);
  }
  if (n.domain == kOneBitDomain && n.op_type == "Q4MatMul") {
    route = npu::Route::kQ4;
    return weight_dims(1);
  }
  if (n.domain == kMicrosoftDomain && n.op_type == "MatMulNBits") {
    route = npu::Route::kQ4;
    k = n.attrs.get_int("K", 0);
    nn = n.attrs.get_int("N", 0);
    return k > 0 && nn > 0;
  }
  return false;
}

int64_t rows_of(const std::vector<Shape>& shapes, const Node& n, int64_t k) {
  if (n.inputs.empty() || n.inputs[0] < 0) return -1;
  const Shape& x = shapes[static_cast<size_t>(n.inputs[0])];
  if (x.empty() || k <= 0) return -1;
  return numel(x) / k;
}

}  // namespace

std::vector<NpuGemm> npu_gemms(Model& model, int64_t prompt_tokens) {
  Session& s = model.session();
  const Graph& g = s.graph();
  Generator& gen = model.generator();
  const std::vector<Shape> prefill = s.value_shapes(gen.shapes_for(prompt_tokens, 0));
  const bool cached = model.binding().cache != CausalLmBinding::Cache::None;
  std::vector<Shape> decode;
  if (cached) decode = s.value_shapes(gen.shapes_for(1, prompt_tokens));
  std::vector<NpuGemm> out;
  for (const Node& n : g.nodes) {
    NpuGemm gm;
    if (!gemm_of(g, n, gm.route, gm.k, gm.n)) continue;
    gm.node = n.name;
    gm.prefill_rows = rows_of(prefill, n, gm.k);
    gm.decode_rows = cached ? rows_of(decode, n, gm.k) : 0;
    out.push_back(gm);
  }
  return out;
}

}  // namespace onebit
