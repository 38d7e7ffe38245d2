// Running a loaded graph the way a user would: a session with every pass,
// then one run on small inputs made from the graph's declared inputs.
#pragma once

#include <cstring>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "ops/register_ops.h"
#include "tests/fuzz/fuzz_util.h"

namespace onebit::fuzz {

inline void run_graph(Graph g, bool basic) {
  SessionOptions o;
  o.threads = 1;
  o.basic = basic;
  Session s(std::move(g), default_op_registry(), o);
  std::vector<NamedTensor> inputs;
  for (int v : s.graph().inputs) {
    const Value& val = s.graph().value(v);
    DType t = val.dtype == DType::Undefined ? DType::F32 : val.dtype;
    if (t == DType::String || dtype_bits(t) == 0) return;
    Shape shape;
    if (!val.has_shape) shape = {3};
    for (const Dim& d : val.dims) shape.push_back(d.value >= 0 ? d.value : 3);
    const int64_t n = checked_numel(shape);
    if (n < 0 || n > 4096) return;  // the harness makes small inputs only
    Tensor x = Tensor::allocate(t, shape);
    auto* b = static_cast<uint8_t*>(x.raw());
    for (size_t i = 0; i < x.bytes(); ++i) b[i] = static_cast<uint8_t>(i % 5);  // small values, valid indices
    inputs.push_back({val.name, std::move(x)});
  }
  s.run(inputs);
}

}  // namespace onebit::fuzz
