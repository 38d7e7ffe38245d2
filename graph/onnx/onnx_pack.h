// `1bit pack`: rewrites an .onnx file so every MatMul with a constant float
// weight reads 4-bit weights through a DequantizeLinear (DESIGN.md "Q4NX,
// weight-only 4-bit"), in plain opset 21 that any runtime can load:
//
//   W [K,N] float ──────────────────────────────> MatMul(x, W)
//   E [N,K] float ──Transpose(perm [1,0])──> W ─> MatMul(x, W)      (tied lm_head)
// becomes
//   W_q4 [K,N] int4 ──DequantizeLinear(scale [ceil(K/bs),N], axis 0, block_size bs)──> MatMul(x, ·)
//   (per channel: scale [N], axis 1; uint4: with a zero point of 8s;
//    float16 scales: a Cast to float after the DequantizeLinear, since the
//    DequantizeLinear's output has its scale's type)
//
// Everything else stays: node order and names, other initializers and their
// bytes, inputs, outputs, metadata (plus an `onebit.pack` entry). A float
// weight nothing reads any more is dropped (an embedding table a Gather
// still reads stays). ai.onnx is raised to 21 only when it is lower and
// that is safe (see pack_onnx).
//
// Protobuf stays in this file and the loader; tensor data is read through
// the loader's mappings (external data included).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "quant/q4_quantize.h"

namespace onebit {

class ThreadPool;

struct PackProgress {
  size_t weights_done = 0, weights_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  // float bytes of the weights
  const std::string* current = nullptr;      // the weight being packed
};

struct PackOptions {
  Q4QuantizeOptions quant;                // block size (0: per channel), signedness, scale type, clipping
  std::vector<std::string> exclude;       // initializer, value or MatMul node names; '*' and '?' glob
  enum class External { kAuto, kAlways, kNever } external = External::kAuto;
  std::function<void(const PackProgress&)> progress;
  ThreadPool* pool = nullptr;
};

struct PackResult {
  int64_t matmuls = 0;         // MatMul nodes in the source
  int64_t packed_matmuls = 0;  // rewritten
  int64_t packed_weights = 0;  // distinct weights quantized
  std::vector<std::string> excluded;           // weights kept float by --exclude
  std::map<std::string, int64_t> not_packed;   // reason -> MatMuls left as they were
  uint64_t float_bytes = 0;    // the packed weights as float
  uint64_t packed_bytes = 0;   // their codes, scales and zero points
  double sum_sq_error = 0, sum_sq = 0, max_abs_error = 0;
  bool external = false;       // wrote `out`.data
  std::string external_path;
  bool opset_raised = false;
};

// Reads `in` (through load_onnx), writes `out` (and `out`.data beside it with
// external data: with kAlways, or with kAuto when the source keeps its
// weights in external data or the result would pass 1.8 GB). Throws
// onebit::Error naming the file and the node or tensor at fault.
PackResult pack_onnx(const std::string& in, const std::string& out, const PackOptions& options);

// Whether `name` matches an --exclude pattern ('*' any run, '?' one char).
bool pack_name_matches(const std::string& pattern, const std::string& name);

}  // namespace onebit
