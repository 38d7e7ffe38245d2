// Element types of values the file leaves undeclared. torch.onnx's
// TorchScript exporter (the one Optimum's exports come from) declares the
// graph's inputs and outputs and nothing in between, and the fusions that
// take only float32 or float16 (SwiGLU, the RMS norm's Casts) would refuse
// every candidate as of unknown dtype. ONNX types each op's outputs from its
// inputs and attributes, so a walk in topological order fills them in:
//
//   - the type of input 0 (elementwise math, data movement, MatMul, the
//     reductions, Softmax, Gather, Concat, Range ...), of input 1 for Where;
//   - bool for comparisons, logic, IsNaN and IsInf; int64 for Shape, Size,
//     ArgMax, ArgMin and NonZero;
//   - Cast's `to`, CastLike's input 1, ConstantOfShape's `value` (float32
//     without one);
//   - onnxruntime's MatMulNBits, MatMulBnb4, FusedMatMul,
//     DynamicQuantizeMatMul, Skip(Simplified)LayerNormalization and
//     RotaryEmbedding as their input 0, MatMulIntegerToFloat and
//     GatherBlockQuantized as their scales (input 2): a quantized export's
//     MatMuls typed like the float ones.
//
// A declared dtype is never changed, and an op not listed here (or an input
// whose type is still unknown) leaves its outputs undeclared. Only the
// fusions read these: kernels take their types from the tensors they get.
//
// With the types known, a Cast to the type its input already has is a copy
// (that exporter writes two around every float32 RMS norm, and the first
// one's output is the residual's too); so are Identity and a Concat of one
// input (transformers' cache writes one over the first layer's past keys,
// which hid that input from the kv-state pass). Their readers read the input
// instead, unless the copy is a graph output.
#include <algorithm>
#include <map>
#include <set>

#include "graph/passes/match.h"
#include "graph/passes/fusion.h"
#include "graph/passes/passes.h"

namespace onebit {
namespace {

// Outputs typed as input 0.
const std::set<std::string>& like_input0() {
  static const std::set<std::string> ops = {
      "Abs",        "Add",        "Ceil",       "Clip",        "Concat",      "Cos",        "CumSum",
      "Div",        "Elu",        "Erf",        "Exp",         "Expand",      "Flatten",    "Floor",
      "Gather",     "GatherElements", "GatherND", "Gelu",      "Gemm",        "HardSigmoid", "Identity",
      "LayerNormalization", "LeakyRelu", "Log",  "LogSoftmax", "MatMul",     "Max",        "Min",
      "Mod",        "Mul",        "Neg",        "Pad",         "Pow",         "Range",      "Reciprocal",
      "ReduceL2",   "ReduceMax",  "ReduceMean", "ReduceMin",   "ReduceProd",  "ReduceSum",  "ReduceSumSquare",
      "Relu",       "Reshape",    "RMSNormalization", "Round", "ScatterElements", "ScatterND", "Sigmoid",
      "Sign",       "Sin",        "Slice",      "Softmax",     "Softplus",    "Split",      "Sqrt",
      "Squeeze",    "Sub",        "Tanh",       "Tile",        "Transpose",   "Trilu",      "Unsqueeze",
  };
  return ops;
}

const std::set<std::string>& boolean() {
  static const std::set<std::string> ops = {"And",  "Equal", "Greater", "GreaterOrEqual", "IsInf", "IsNaN",
                                            "Less", "LessOrEqual", "Not", "Or", "Xor"};
  return ops;
}

const std::set<std::string>& int64() {
  static const std::set<std::string> ops = {"ArgMax", "ArgMin", "NonZero", "Shape", "Size"};
  return ops;
}

// onnxruntime's contrib ops that quantized exports put in place of MatMul
// and Gather (and the genai builder's norms and rotary): output 0's dtype
// is that of input `from`.
int contrib_typed_as(const std::string& op) {
  static const std::map<std::string, int> ops = {
      {"MatMulNBits", 0},         {"MatMulBnb4", 0},   {"FusedMatMul", 0},
      {"DynamicQuantizeMatMul", 0}, {"SkipSimplifiedLayerNormalization", 0}, {"SkipLayerNormalization", 0},
      {"RotaryEmbedding", 0},     {"MatMulIntegerToFloat", 2}, {"GatherBlockQuantized", 2}};
  const auto it = ops.find(op);
  return it == ops.end() ? -1 : it->second;
}

// The dtype of output 0 of `n` (of every output, for Split) as ONNX types
// it, Undefined when not known here.
DType output_dtype(const Graph& g, const Node& n) {
  const std::string& op = n.op_type;
  if (n.domain == kMicrosoftDomain) {
    const int from = contrib_typed_as(op);
    return from < 0 ? DType::Undefined : value_dtype(g, input_at(n, static_cast<size_t>(from)));
  }
  if (!n.domain.empty()) return DType::Undefined;
  if (like_input0().count(op)) return value_dtype(g, input_at(n, 0));
  if (boolean().count(op)) return DType::Bool;
  if (int64().count(op)) return DType::I64;
  if (op == "Where") return value_dtype(g, input_at(n, 1));
  if (op == "CastLike") return value_dtype(g, input_at(n, 1));
  if (op == "Cast") {
    const int64_t to = n.attrs.get_int("to", 0);
    return to > 0 && to < 64 && dtype_supported(static_cast<int32_t>(to)) ? static_cast<DType>(to) : DType::Undefined;
  }
  if (op == "ConstantOfShape") {
    const Tensor* value = n.attrs.get_tensor("value");
    return value ? value->dtype() : DType::F32;
  }
  return DType::Undefined;
}

}  // namespace

void infer_dtypes(Graph& g, PassContext& ctx) {
  int64_t filled = 0, copies = 0;
  std::vector<int> same(g.values.size(), -1);  // a copy -> what it copies
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (int& v : n.inputs)
      if (v >= 0 && same[static_cast<size_t>(v)] >= 0) v = same[static_cast<size_t>(v)];
    const DType t = output_dtype(g, n);
    // Split and LayerNormalization type their optional outputs otherwise
    // (LayerNormalization's Mean and InvStdDev by stash_type): only output 0.
    const size_t typed = t == DType::Undefined ? 0
                         : n.op_type == "Split" ? n.outputs.size()
                                                : std::min<size_t>(1, n.outputs.size());
    for (size_t k = 0; k < typed; ++k) {
      const int o = n.outputs[k];
      if (o < 0 || g.value(o).dtype != DType::Undefined) continue;
      g.value(o).dtype = t;
      ++filled;
    }
    if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0] < 0 || input_at(n, 0) < 0 ||
        g.value(n.outputs[0]).is_output)
      continue;
    const bool copy = n.op_type == "Identity" || (n.op_type == "Concat" && n.inputs.size() == 1) ||
                      (n.op_type == "Cast" && t != DType::Undefined && value_dtype(g, n.inputs[0]) == t &&
                       g.value(n.outputs[0]).dtype == t);
    if (!copy) continue;
    same[static_cast<size_t>(n.outputs[0])] = n.inputs[0];
    drop[i] = true;
    ++copies;
  }
  ctx.report.count("dtypes_inferred", filled);
  if (copies == 0) return;
  drop_nodes(g, drop);
  ctx.report.count("copies_removed", copies);
}

}  // namespace onebit
