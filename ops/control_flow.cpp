// If (ai.onnx 16-25) on branches whose outputs are constants
// (graph/graph.h, ConstantBranch): what onnxruntime-genai's builder writes
// to pick a LongRoPE model's rotary caches — the short factors' or the long
// ones', by whether the sequence has outgrown the original context (Phi-3
// 128k, Phi-3.5, Phi-4-mini). The outputs are the chosen branch's tensors,
// viewed where they are (held by the kernel: nothing is copied, a cache of
// 131072 positions is 25 MB). The two branches may differ in shape, so the
// condition is read when planning (in a decode step it is a fold of input
// shapes) or, when it depends on data, at run time. Branches that compute
// are not run: the kernel refuses them at load, saying what the branch holds.
#include "graph/op_registry.h"
#include "ops/op_util.h"

namespace onebit {

namespace {

class IfKernel : public Kernel {
 public:
  explicit IfKernel(const KernelInfo& info) {
    for (const char* name : {"then_branch", "else_branch"}) {
      const Attribute* a = info.attrs().find(name);
      if (!a || a->kind != Attribute::Kind::Graph || !a->graph) fail("attribute {} (a graph) is required", name);
      const ConstantBranch& b = *a->graph;
      if (!b.not_constant.empty())
        fail("{}: {}; 1bit runs If only on branches whose outputs are constants", name, b.not_constant);
      if (b.outputs.size() != static_cast<size_t>(info.num_outputs()))
        fail("{} has {} outputs, the node {}", name, b.outputs.size(), info.num_outputs());
      branches_.push_back(a->graph);
    }
  }

  void reshape(ReshapeContext& ctx) override {
    const ConstantBranch& b = chosen(ctx.value(0));
    for (int o = 0; o < ctx.num_outputs(); ++o)
      if (ctx.has_output(o))
        ctx.hold_output(o, b.outputs[static_cast<size_t>(o)].dtype(), b.outputs[static_cast<size_t>(o)].shape());
  }

  void run(RunContext& ctx) override {
    const ConstantBranch& b = chosen(ctx.input(0));
    for (int o = 0; o < ctx.num_outputs(); ++o)
      if (ctx.has_output(o)) ctx.output(o) = b.outputs[static_cast<size_t>(o)];  // a view of the constant
  }

 private:
  const ConstantBranch& chosen(const Tensor& cond) const {
    if (cond.dtype() != DType::Bool || cond.size() != 1)
      fail("input cond is {} {}, expected one bool", dtype_name(cond.dtype()), shape_str(cond.shape()));
    return *branches_[cond.data<bool>()[0] ? 0 : 1];
  }

  std::vector<std::shared_ptr<const ConstantBranch>> branches_;  // then, else
};

}  // namespace

void register_control_flow_ops(OpRegistry& r) {
  r.add_versions("", "If", {13, 16, 19, 21, 23, 24, 25}, make_factory<IfKernel>());
}

}  // namespace onebit
