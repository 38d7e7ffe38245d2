// Runs one node on values that exist now: constant folding at load and
// shape-subgraph folding at plan time both come through here.
#pragma once

#include <cstddef>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor.h"

namespace onebit {

class Kernel;
class ThreadPool;

// Plans and runs `kernel` for `node` on `inputs` (null for omitted inputs;
// an input whose data the kernel does not read may have a null pointer but
// must carry its shape). Returns one owning tensor per output slot (empty
// for omitted outputs).
std::vector<Tensor> evaluate_node(const Graph& g, const Node& node, Kernel& kernel,
                                  const std::vector<const Tensor*>& inputs, ThreadPool& pool);

// Bytes `kernel` would allocate for the outputs of `node` on `inputs`
// (reshape only: nothing is allocated or run). For callers that must bound
// what they materialize before they do (constant folding).
size_t output_bytes(const Graph& g, const Node& node, Kernel& kernel, const std::vector<const Tensor*>& inputs);

}  // namespace onebit
