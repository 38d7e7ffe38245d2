// Structural checks on a freshly loaded or rewritten graph, and the
// topological order every later stage relies on.
#pragma once

#include "graph/graph.h"

namespace onebit {

// Checks that every node input is defined (graph input, initializer or node
// output), that graph outputs are defined, and sorts `g.nodes` topologically
// (stable: independent nodes keep file order). Throws on a cycle, naming the
// nodes on it.
void validate(Graph& g);

}  // namespace onebit
