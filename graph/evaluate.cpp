#include "graph/evaluate.h"

#include "base/error.h"
#include "base/memory_budget.h"
#include "graph/kernel.h"

namespace onebit {

namespace {

ReshapeContext reshape_for(const Node& node, Kernel& kernel, const std::vector<const Tensor*>& inputs) {
  std::vector<InputInfo> infos(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    infos[i].present = true;
    infos[i].dtype = inputs[i]->dtype();
    infos[i].shape = &inputs[i]->shape();
    infos[i].value = inputs[i]->raw() || inputs[i]->size() == 0 ? inputs[i] : nullptr;
  }
  std::vector<bool> present(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) present[o] = node.outputs[o] >= 0;
  ReshapeContext rc(std::move(infos), static_cast<int>(node.outputs.size()), present);
  kernel.reshape(rc);
  return rc;
}

}  // namespace

size_t output_bytes(const Graph& g, const Node& node, Kernel& kernel, const std::vector<const Tensor*>& inputs) {
  const ReshapeContext rc = reshape_for(node, kernel, inputs);
  uint64_t total = 0;
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const OutputPlan& p = rc.outputs()[o];
    if (node.outputs[o] < 0 || p.held) continue;
    if (!p.set) fail("{}: kernel did not plan output {}", g.node_label(node), o);
    total += dtype_bytes(p.dtype, numel(p.shape));  // each at most 2^48: the sum cannot wrap
  }
  return static_cast<size_t>(total);
}

std::vector<Tensor> evaluate_node(const Graph& g, const Node& node, Kernel& kernel,
                                  const std::vector<const Tensor*>& inputs, ThreadPool& pool) {
  ReshapeContext rc = reshape_for(node, kernel, inputs);
  std::vector<bool> present(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) present[o] = node.outputs[o] >= 0;
  std::vector<Tensor> outs(node.outputs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const OutputPlan& p = rc.outputs()[o];
    if (!present[o]) continue;
    if (!p.set) fail("{}: kernel did not plan output {}", g.node_label(node), o);
    outs[o] = p.held ? Tensor(p.dtype, p.shape, nullptr) : Tensor::allocate(p.dtype, p.shape);
  }
  MemoryReservation budget(rc.workspace(), "a workspace");
  std::vector<uint8_t> workspace(rc.workspace() + 64);
  void* ws = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
  RunContext ctx(inputs.data(), static_cast<int>(inputs.size()), outs.data(), static_cast<int>(outs.size()),
                 rc.workspace() ? ws : nullptr, rc.workspace(), pool);
  kernel.run(ctx);
  // A held output is the kernel's own storage (a state, a constant it
  // picked): what a node evaluated here returns is the caller's.
  for (size_t o = 0; o < outs.size(); ++o)
    if (present[o] && rc.outputs()[o].held) outs[o] = Tensor::clone(outs[o]);
  return outs;
}

}  // namespace onebit
