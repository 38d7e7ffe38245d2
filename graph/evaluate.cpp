#include "graph/evaluate.h"

#include "base/error.h"
#include "graph/kernel.h"

namespace onebit {

std::vector<Tensor> evaluate_node(const Graph& g, const Node& node, Kernel& kernel,
                                  const std::vector<const Tensor*>& inputs, ThreadPool& pool) {
  std::vector<InputInfo> infos(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    infos[i].present = true;
    infos[i].dtype = inputs[i]->dtype();
    infos[i].shape = inputs[i]->shape();
    infos[i].value = inputs[i]->raw() || inputs[i]->size() == 0 ? inputs[i] : nullptr;
  }
  std::vector<bool> present(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) present[o] = node.outputs[o] >= 0;
  ReshapeContext rc(std::move(infos), static_cast<int>(node.outputs.size()), present);
  kernel.reshape(rc);
  std::vector<Tensor> outs(node.outputs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const OutputPlan& p = rc.outputs()[o];
    if (!present[o]) continue;
    if (!p.set) fail("{}: kernel did not plan output {}", g.node_label(node), o);
    outs[o] = p.held ? Tensor(p.dtype, p.shape, nullptr) : Tensor::allocate(p.dtype, p.shape);
  }
  std::vector<uint8_t> workspace(rc.workspace() + 64);
  void* ws = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
  RunContext ctx(inputs.data(), static_cast<int>(inputs.size()), outs.data(), static_cast<int>(outs.size()),
                 rc.workspace() ? ws : nullptr, pool);
  kernel.run(ctx);
  return outs;
}

}  // namespace onebit
