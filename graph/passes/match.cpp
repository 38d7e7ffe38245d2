#include "graph/passes/match.h"

#include <fmt/format.h>

#include "base/error.h"
#include "graph/passes/fusion.h"

namespace onebit {

void make_onebit_node(Node& n, const char* op, std::vector<int> inputs) {
  n.op_type = op;
  n.domain = kOneBitDomain;
  n.opset = 1;
  n.inputs = std::move(inputs);
}

int add_scalar_constant(Graph& g, const std::string& base, float v, DType dtype) {
  if (dtype != DType::F32 && dtype != DType::F16) fail("a scalar constant of {}, expected float32 or float16", dtype_name(dtype));
  Value sv;
  sv.name = g.unique_name(base);
  sv.dtype = dtype;
  sv.has_shape = true;
  Tensor t = Tensor::allocate(dtype, {});
  if (dtype == DType::F16) *t.data<uint16_t>() = float_to_half(v);
  else *t.data<float>() = v;
  sv.constant = std::move(t);
  return g.add_value(std::move(sv));
}

void drop_nodes(Graph& g, const std::vector<bool>& drop) {
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (!drop[n]) kept.push_back(std::move(g.nodes[n]));
  g.nodes = std::move(kept);
  g.relink();
}

void report_refusals(const Graph& g, PassContext& ctx, const std::string& prefix,
                     const std::map<std::string, int64_t>& refused) {
  int64_t total = 0;
  for (const auto& [why, count] : refused) {
    ctx.report.count(prefix + "_refused:" + why, count);
    total += count;
    if (ctx.options.debug_refusals) fmt::print(stderr, "{}: {}_refused why={} count={}\n", g.path, prefix, why, count);
  }
  ctx.report.count(prefix + "_refused", total);
}

}  // namespace onebit
