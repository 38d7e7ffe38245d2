// Last-position outputs: generation reads only the last row of the logits,
//
//   h [.., S, H] --> MatMul(h, W) --> logits [.., S, V]                 (graph output)
//
// becomes
//
//   h --Slice(starts [-1], ends [INT64_MAX], axes [-2])--> [.., 1, H] --> MatMul --> logits [.., 1, V]
//
// so a prefill computes one row of the LM head instead of S (Qwen3-0.6B at
// S = 1024: 318 GFLOP and a 622 MB output less). Rows of a MatMul are
// independent, so the row kept is the row the full product would have had.
// It runs only for the outputs the caller names
// (SessionOptions::last_position_outputs: the generator's logits; `1bit run`
// names none). When the activation comes through a per-tensor
// DequantizeLinear (and the QuantizeLinear before it), the Slice goes in
// front of them, so a QDQ group stays a group; com.microsoft::MatMulNBits is
// handled like MatMul. A Cast of the product that alone reads it (an export
// converted to float16 keeping float32 outputs: transformers.js'
// model_fp16.onnx) passes the rows through as they are.
//
// With SessionOptions::last_rows_input the Slice starts at −R, R the length
// of a shape-only graph input (kLastRowsInput) the pass adds:
// Neg(Shape(rows)) folds at plan time, and each R is its own plan.
#include <algorithm>
#include <fmt/format.h>
#include <limits>

#include "graph/passes/passes.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

bool is_row_product(const Node& n) {
  return (n.op_type == "MatMul" && n.domain.empty()) || (n.op_type == "MatMulNBits" && n.domain == "com.microsoft");
}

int add_i64_constant(Graph& g, const std::string& base, int64_t v) {
  Value c;
  c.name = g.unique_name(base);
  c.dtype = DType::I64;
  c.has_shape = true;
  c.dims = {Dim{1, ""}};
  Tensor t = Tensor::allocate(DType::I64, {1});
  *t.data<int64_t>() = v;
  c.constant = std::move(t);
  return g.add_value(std::move(c));
}

// Where to cut for output `out`: the node whose input `slot` gets the Slice.
struct Cut {
  int node = -1;
  size_t slot = 0;
};

// A per-tensor Quantize/DequantizeLinear (constant scalar scale) whose output
// only one node reads: rows pass through it unchanged.
bool per_tensor_q(const Graph& g, const std::vector<std::vector<int>>& consumers, const Node* n, const char* op) {
  if (!n || !is_q_op(*n, op)) return false;
  if (n->inputs.size() < 2 || !constant_scalar(g, input_at(*n, 1)).has_value()) return false;
  return consumers[static_cast<size_t>(n->outputs[0])].size() == 1;
}

Cut find_cut(const Graph& g, const std::vector<std::vector<int>>& consumers, int out) {
  int p = producer_index(g, out);
  if (const Node* cast = producer_op(g, out, "Cast"); cast && cast->inputs.size() == 1 && cast->inputs[0] >= 0 &&
                                                       consumers[static_cast<size_t>(cast->inputs[0])].size() == 1 &&
                                                       !g.value(cast->inputs[0]).is_output)
    p = producer_index(g, cast->inputs[0]);
  if (p < 0) return {};
  const Node& mm = g.node(p);
  if (!is_row_product(mm) || mm.inputs.empty() || mm.inputs[0] < 0) return {};
  // Walk back through a per-tensor DequantizeLinear and the QuantizeLinear
  // feeding it, so the A8W8 group (Q -> DQ -> MatMul) stays whole.
  Cut cut{p, 0};
  const Node* dq = producer_node(g, mm.inputs[0]);
  if (dq && dq->op_type == "DequantizeLinear") {
    if (!per_tensor_q(g, consumers, dq, "DequantizeLinear")) return {};
    cut = {producer_index(g, mm.inputs[0]), 0};
    const Node* q = producer_node(g, input_at(*dq, 0));
    if (per_tensor_q(g, consumers, q, "QuantizeLinear")) cut = {producer_index(g, input_at(*dq, 0)), 0};
  }
  return cut;
}

}  // namespace

void keep_last_position(Graph& g, PassContext& ctx) {
  const SessionOptions& options = ctx.options;
  if (options.last_position_outputs.empty()) return;
  const auto consumers = g.consumers();
  std::vector<std::pair<Cut, int>> cuts;  // (cut, output value)
  for (const std::string& name : options.last_position_outputs) {
    const int out = g.find_value(name);
    if (out < 0) continue;
    const Value& o = g.value(out);
    if (!o.is_output || !o.has_shape || o.dims.size() < 2) continue;
    // Another node reading the full output would see a different shape.
    if (!consumers[static_cast<size_t>(out)].empty()) continue;
    const Cut cut = find_cut(g, consumers, out);
    if (cut.node >= 0) cuts.push_back({cut, out});
  }
  const int64_t opset = g.opsets.count("") ? g.opsets.at("") : 21;  // of the nodes added
  // −R from the rows input: Neg(Shape(rows)), inserted first of all nodes.
  int starts = -1;
  // A graph that names a value so itself keeps one row (lookup decoding
  // then says it needs the rows).
  const bool name_taken = g.find_value(kLastRowsInput) >= 0;
  if (options.last_rows_input && !cuts.empty() && name_taken) {
    ctx.report.count("last_rows_refused:name_taken", 1);
    ctx.report.log.push_back(fmt::format("last-position: the graph has its own value '{}': one row kept", kLastRowsInput));
  }
  if (options.last_rows_input && !cuts.empty() && !name_taken) {
    Value rows;
    rows.name = kLastRowsInput;
    rows.dtype = DType::I64;
    rows.has_shape = true;
    rows.dims = {Dim{-1, "last_rows"}};
    rows.is_input = true;
    const int rows_id = g.add_value(std::move(rows));
    g.inputs.push_back(rows_id);
    auto add_node = [&](const char* op, int in, const std::string& out_name) {
      Value out;
      out.name = g.unique_name(out_name);
      out.dtype = DType::I64;
      const int out_id = g.add_value(std::move(out));
      Node n;
      n.name = g.unique_name(out_name);
      n.op_type = op;
      n.opset = opset;
      n.inputs = {in};
      n.outputs = {out_id};
      return std::pair{std::move(n), out_id};
    };
    auto [shape, rows_len] = add_node("Shape", rows_id, "last_rows/shape");
    auto [neg, minus_rows] = add_node("Neg", rows_len, "last_rows/starts");
    starts = minus_rows;
    for (auto& [cut, out] : cuts) cut.node += 2;
    g.nodes.insert(g.nodes.begin(), std::move(neg));
    g.nodes.insert(g.nodes.begin(), std::move(shape));
    ctx.report.count("last_rows", 1);
  }
  // Insert from the last node back so earlier indices stay valid.
  std::sort(cuts.begin(), cuts.end(), [](const auto& a, const auto& b) { return a.first.node > b.first.node; });
  for (const auto& [cut, out] : cuts) {
    const int src = g.node(cut.node).inputs[cut.slot];
    Value sliced;
    sliced.name = g.unique_name(g.value(src).name + "/last_position");
    sliced.dtype = g.value(src).dtype;
    const int sliced_id = g.add_value(std::move(sliced));
    Node slice;
    slice.name = g.unique_name(g.node(cut.node).name + "/last_position");
    slice.op_type = "Slice";
    slice.opset = opset;
    slice.inputs = {src, starts >= 0 ? starts : add_i64_constant(g, slice.name + "/starts", -1),
                    add_i64_constant(g, slice.name + "/ends", std::numeric_limits<int64_t>::max()),
                    add_i64_constant(g, slice.name + "/axes", -2)};
    slice.outputs = {sliced_id};
    g.node(cut.node).inputs[cut.slot] = sliced_id;
    g.nodes.insert(g.nodes.begin() + cut.node, std::move(slice));
    Value& o = g.value(out);
    if (o.has_shape && o.dims.size() >= 2) o.dims[o.dims.size() - 2] = starts >= 0 ? Dim{-1, "last_rows"} : Dim{1, ""};
    ctx.report.log.push_back(fmt::format("last-position: '{}' computes only its last {}", o.name,
                                         starts >= 0 ? "rows (as many as " + std::string(kLastRowsInput) + ")" : "row"));
  }
  if (!cuts.empty()) g.relink();
  ctx.report.count("last_position", static_cast<int64_t>(cuts.size()));
}

}  // namespace onebit
