#include "graph/kernel.h"

namespace onebit {

const Tensor* KernelInfo::constant(int i) const {
  if (!has_input(i)) return nullptr;
  const Value& v = graph_.value(node_.inputs[static_cast<size_t>(i)]);
  return v.constant ? &*v.constant : nullptr;
}

int KernelInfo::readers(int i) const {
  if (!has_input(i)) return 0;
  const int v = node_.inputs[static_cast<size_t>(i)];
  int count = graph_.value(v).is_output ? 1 : 0;
  for (const Node& n : graph_.nodes)
    for (int in : n.inputs) count += in == v;
  return count;
}

DType KernelInfo::input_dtype(int i) const {
  if (!has_input(i)) return DType::Undefined;
  return graph_.value(node_.inputs[static_cast<size_t>(i)]).dtype;
}

const std::string& KernelInfo::input_name(int i) const {
  static const std::string none;
  if (!has_input(i)) return none;
  return graph_.value(node_.inputs[static_cast<size_t>(i)]).name;
}

void KernelInfo::refuse_before(const char* name, int64_t since) const {
  if (attrs().has(name) && opset() < since)
    fail("attribute '{}' needs ai.onnx opset {}; this node is opset {}", name, since, opset());
}

const InputInfo& ReshapeContext::input(int i) const {
  if (!has_input(i)) fail("input {} is required but missing", i);
  return inputs_[static_cast<size_t>(i)];
}

void RunContext::missing(int i, const char* what) { fail("{} {} is required but missing", what, i); }

const Tensor& ReshapeContext::value(int i) const {
  note_read(i);
  const InputInfo& in = input(i);
  if (!in.value) throw NeedsValue{i};
  return *in.value;
}

void ReshapeContext::start(int num_inputs, int num_outputs) {
  inputs_.assign(static_cast<size_t>(num_inputs), InputInfo{});
  outputs_.resize(static_cast<size_t>(num_outputs));
  for (OutputPlan& o : outputs_) {
    o.dtype = DType::Undefined;
    o.shape.clear();  // its storage kept
    o.alias_of = -1;
    o.alias_offset = 0;
    o.held = false;
    o.set = false;
  }
  present_.assign(static_cast<size_t>(num_outputs), true);
  workspace_ = 0;
  data_read_ = 0;
}

void ReshapeContext::set_output(int i, DType dtype, Shape shape) {
  if (i >= num_outputs()) return;
  OutputPlan& o = outputs_[static_cast<size_t>(i)];
  o.dtype = dtype;
  o.shape = std::move(shape);
  o.alias_of = -1;
  o.alias_offset = 0;
  o.held = false;
  o.set = true;
}

void ReshapeContext::hold_output(int i, DType dtype, Shape shape) {
  set_output(i, dtype, std::move(shape));
  if (i < num_outputs()) outputs_[static_cast<size_t>(i)].held = true;
}

void ReshapeContext::alias_output(int i, int in, Shape shape, int64_t byte_offset) {
  set_output(i, dtype(in), std::move(shape));
  if (i < num_outputs()) {
    outputs_[static_cast<size_t>(i)].alias_of = in;
    outputs_[static_cast<size_t>(i)].alias_offset = byte_offset;
  }
}

}  // namespace onebit
