// The kernel lifecycle, after XNNPACK's operators:
//   create  (the factory) — validate attributes, pack constant inputs once;
//   reshape — given input dtypes and shapes (and the values of inputs known at
//             plan time), state output dtypes and shapes and the workspace;
//   run     — bind pointers and compute; allocates nothing. It takes sizes
//             from the tensors it runs on, never from members reshape set:
//             a session keeps several plans (prefill, decode) and reshape
//             last ran for whichever was built last (tests/test_plan_state).
// Kernels see the IR's Node through KernelInfo, never protobuf.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/graph.h"
#include "graph/session_options.h"
#include "graph/tensor.h"

namespace onebit {

class ThreadPool;

// What a kernel factory sees of its node, and the session's options for
// kernels (the one channel from the command line to a kernel).
class KernelInfo {
 public:
  KernelInfo(const Graph& g, const Node& n, ThreadPool* pool, const KernelOptions& options)
      : graph_(g), node_(n), pool_(pool), options_(options) {}

  const Node& node() const { return node_; }
  const std::string& op_type() const { return node_.op_type; }
  int64_t opset() const { return node_.opset; }
  const Attributes& attrs() const { return node_.attrs; }
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  int num_outputs() const { return static_cast<int>(node_.outputs.size()); }
  bool has_input(int i) const { return i < num_inputs() && node_.inputs[static_cast<size_t>(i)] >= 0; }
  bool has_output(int i) const { return i < num_outputs() && node_.outputs[static_cast<size_t>(i)] >= 0; }
  // The input's value when it is a constant (initializer or folded), else null.
  const Tensor* constant(int i) const;
  // How many node inputs of the graph read input i's value (this one
  // included), and 1 more when it is a graph output: a constant read
  // elsewhere stays in memory whatever this kernel packs.
  int readers(int i) const;
  // Declared dtype of an input (Undefined when the file does not say).
  DType input_dtype(int i) const;
  const std::string& input_name(int i) const;
  // An error when the node states attribute `name`, which ai.onnx added at
  // opset `since`, at an older opset: each node runs at its imported version.
  void refuse_before(const char* name, int64_t since) const;
  std::string label() const { return graph_.node_label(node_); }
  // The session's pool, for packing large constants at create; may be null.
  ThreadPool* pool() const { return pool_; }
  const KernelOptions& options() const { return options_; }

 private:
  const Graph& graph_;
  const Node& node_;
  ThreadPool* pool_;
  const KernelOptions& options_;
};

// Thrown by ReshapeContext::value() when an input's value is needed to plan
// and is not known until run time; the session then plans the node at run
// time. Not an error.
struct NeedsValue {
  int input;
};

struct InputInfo {
  DType dtype = DType::Undefined;
  const Shape* shape = nullptr;   // the caller's (a plan's value, a tensor), alive while the context is used
  const Tensor* value = nullptr;  // known at plan time, else null
  bool present = false;
};

struct OutputPlan {
  DType dtype = DType::Undefined;
  Shape shape;
  int alias_of = -1;         // input index whose bytes this output may reuse
  int64_t alias_offset = 0;  // byte offset of the output inside that input
  bool held = false;         // storage the kernel keeps across runs (hold_output)
  bool set = false;
};

class ReshapeContext {
 public:
  ReshapeContext(std::vector<InputInfo> inputs, int num_outputs, std::vector<bool> output_present)
      : inputs_(std::move(inputs)), outputs_(static_cast<size_t>(num_outputs)), present_(std::move(output_present)) {}
  ReshapeContext() = default;

  // The same context for another node, keeping its storage (the planner
  // reshapes node after node with one): num_inputs absent inputs for the
  // caller to fill (input_slot), num_outputs outputs, all present until
  // the caller says otherwise (set_present), none planned yet.
  void start(int num_inputs, int num_outputs);
  InputInfo& input_slot(int i) { return inputs_[static_cast<size_t>(i)]; }
  void set_present(int o, bool present) { present_[static_cast<size_t>(o)] = present; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[static_cast<size_t>(i)].present; }
  DType dtype(int i) const { return input(i).dtype; }
  const Shape& shape(int i) const { return *input(i).shape; }
  int rank(int i) const { return static_cast<int>(input(i).shape->size()); }
  // The input's value, needed to plan (Reshape's shape, Slice's starts, ...).
  // Throws NeedsValue when it is only known at run time.
  const Tensor& value(int i) const;
  const Tensor* value_if_known(int i) const {
    note_read(i);
    return has_input(i) ? input(i).value : nullptr;
  }
  // Bit i (bit 63: input 63 or later) set when the kernel asked for input
  // i's value (value, value_if_known). A reshape is a function of its
  // inputs' dtypes, shapes and the values it asked for: a plan whose other
  // inputs changed only in value need not reshape it (Planner::patch).
  uint64_t data_read() const { return data_read_; }

  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  bool has_output(int i) const { return i < num_outputs() && present_[static_cast<size_t>(i)]; }
  void set_output(int i, DType dtype, Shape shape);
  // Output i holds exactly input `in`'s bytes under a new shape (Reshape,
  // Squeeze, ...); the session may hand it the same storage. run() must
  // still copy when the two pointers differ.
  void alias_output(int i, int in, Shape shape, int64_t byte_offset = 0);
  // Output i is storage the kernel itself keeps across runs (a KV state):
  // the session allocates nothing for it, and run() must point
  // ctx.output(i) at a tensor of this dtype and shape.
  void hold_output(int i, DType dtype, Shape shape);
  void set_workspace(size_t bytes) { workspace_ = bytes; }

  const std::vector<OutputPlan>& outputs() const { return outputs_; }
  size_t workspace() const { return workspace_; }

 private:
  const InputInfo& input(int i) const;
  void note_read(int i) const { data_read_ |= uint64_t{1} << (i >= 0 && i < 63 ? i : 63); }
  std::vector<InputInfo> inputs_;
  std::vector<OutputPlan> outputs_;
  std::vector<bool> present_;
  size_t workspace_ = 0;
  mutable uint64_t data_read_ = 0;
};

class RunContext {
 public:
  RunContext(const Tensor* const* inputs, int num_inputs, Tensor* outputs, int num_outputs, void* workspace,
             size_t workspace_bytes, ThreadPool& pool)
      : inputs_(inputs), num_inputs_(num_inputs), outputs_(outputs), num_outputs_(num_outputs),
        workspace_(workspace), workspace_bytes_(workspace_bytes), pool_(pool) {}

  int num_inputs() const { return num_inputs_; }
  bool has_input(int i) const { return i < num_inputs_ && inputs_[i] != nullptr; }
  // A required input or output the node does not have is an error (one
  // predictable branch; the node's arity comes from an untrusted file).
  const Tensor& input(int i) const {
    if (!has_input(i)) [[unlikely]] missing(i, "input");
    return *inputs_[i];
  }
  int num_outputs() const { return num_outputs_; }
  bool has_output(int i) const { return i < num_outputs_ && outputs_[i].dtype() != DType::Undefined; }
  Tensor& output(int i) const {
    if (i < 0 || i >= num_outputs_) [[unlikely]] missing(i, "output");
    return outputs_[i];
  }
  void* workspace() const { return workspace_; }
  // The bytes at workspace(): at least what reshape asked for, for the
  // shapes the plan last reshaped this node at (Kernel::follows_growth).
  size_t workspace_bytes() const { return workspace_bytes_; }
  ThreadPool& pool() const { return pool_; }

 private:
  [[noreturn]] static void missing(int i, const char* what);
  const Tensor* const* inputs_;
  int num_inputs_;
  Tensor* outputs_;
  int num_outputs_;
  void* workspace_;
  size_t workspace_bytes_;
  ThreadPool& pool_;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void reshape(ReshapeContext& ctx) = 0;
  virtual void run(RunContext& ctx) = 0;
  // Kernels whose output sizes depend on input values (NonZero, ...) return
  // true: the session then plans them at run time, after their inputs exist.
  virtual bool shape_depends_on_data() const { return false; }
  // False for inputs whose shape is all the kernel reads (Shape, Size), so a
  // plan can evaluate the node before that input's data exists.
  virtual bool needs_input_data(int input) const {
    (void)input;
    return true;
  }
  // True when create() copied constant input `input` into a packed form and
  // never reads the original again: the session may then release it.
  virtual bool packs_constant(int input) const {
    (void)input;
    return false;
  }
  // Bytes a run reads from the packed copies of the constants it packs
  // (packs_constant): what a decode step streams in their place, e.g. the
  // int8 panels of a float32 weight quantized at load. 0: packs none.
  virtual uint64_t packed_bytes() const { return 0; }
  // A kernel whose output is its inputs laid end to end along one axis
  // (Concat) returns that axis as the node states it (negative counts from
  // the end): the planner may then have the inputs' producers write straight
  // into the output and skip this kernel (graph/planner.cpp).
  virtual std::optional<int64_t> concat_axis() const { return std::nullopt; }
  // True when a plan may move this node to longer inputs without calling
  // reshape (a steady decode step: Planner::patch repeats the growth of the
  // step before). The kernel promises three things:
  //   - each output dim is a constant or one input dim plus a constant (the
  //     values reshape reads do not change them), and no output is a view
  //     of an input;
  //   - run() checks everything reshape checks, on the tensors it is bound
  //     to, with the same errors; its workspace too (workspace_bytes());
  //   - whatever reshape prepares (a KV state's room), run() prepares too.
  // So a plan grown wrongly fails a run with an error, never reads or
  // writes out of bounds.
  virtual bool follows_growth() const { return false; }
  // One line for traces and `inspect` (which microkernel, which layout).
  virtual std::string describe() const { return {}; }
};

}  // namespace onebit
