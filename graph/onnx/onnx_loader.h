// Reads an .onnx file into the IR. The only code that sees protobuf.
//
// Every check here is a user-facing error (onebit::Error) naming the file and
// the tensor, node or value at fault; nothing is an assert. Initializers are
// views: into the parsed model for embedded data, into an mmapped file for
// external data.
#pragma once

#include <cstdint>
#include <string>

#include "graph/graph.h"
#include "graph/opsets.h"

namespace onebit {

struct LoadOptions {
  // Upper bound on the bytes protobuf may parse. Protobuf itself cannot go
  // past 2 GiB - 1; larger models keep their weights in external data.
  uint64_t max_model_bytes = (uint64_t{1} << 31) - 1;
  // ai.onnx opsets this build implements (graph/opsets.h).
  int64_t min_opset = kOnnxOpsetMin;
  int64_t max_opset = kOnnxOpsetMax;
};

Graph load_onnx(const std::string& path, const LoadOptions& options = {});

// The same, from bytes in memory; `dir` resolves external data.
Graph load_onnx_bytes(const void* data, size_t size, const std::string& name, const std::string& dir,
                      const LoadOptions& options = {});

// A serialized TensorProto file (the ONNX backend tests' input_N.pb), read
// into an owning tensor with the same checks as an initializer. The tensor's
// name is returned through `name` when given.
Tensor load_tensor_file(const std::string& path, std::string* name = nullptr);

}  // namespace onebit
