// The census `1bit inspect` prints: what the file holds, counted from the IR
// as loaded (before any pass), so it can be checked against an independent
// count by the `onnx` Python package.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace onebit {

struct Census {
  int64_t ir_version = 0;
  std::string producer;
  std::map<std::string, int64_t> opsets;        // domain ("ai.onnx" spelled out) -> version
  std::map<std::string, int64_t> op_counts;     // "Op" or "domain::Op" -> nodes
  int64_t nodes = 0;
  int64_t matmuls = 0;                          // MatMul nodes
  std::map<std::pair<int64_t, int64_t>, int64_t> weight_shapes;  // constant-weight MatMul (K, N) -> count
  int64_t constant_weight_matmuls = 0;
  // com.microsoft MatMulNBits / MatMulBnb4 nodes: (op, format, K, N) -> count,
  // format "4-bit block 32" (bits, block_size) or "nf4 block 64" (quant_type).
  std::map<std::tuple<std::string, std::string, int64_t, int64_t>, int64_t> quantized_matmuls;
  std::vector<std::string> custom_domains;      // node domains other than ai.onnx and com.microsoft
  int64_t initializers = 0;
  int64_t initializer_bytes = 0;
  struct Io {
    std::string name;
    std::string dtype;
    std::string dims;  // "[batch,sequence_length,1024]"
  };
  std::vector<Io> inputs, outputs;
};

Census take_census(const Graph& g);
std::string census_text(const Census& c);
std::string census_json(const Census& c);

}  // namespace onebit
