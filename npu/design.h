// The design table: one compiled GEMM design per (M, K, N), C[M,N] int32 =
// A[M,K] int8 · B int8, where B is row-major K×N ("kn", the ONNX MatMul
// weight as it is) or N×K ("nk", a design built column-major). A GEMM is
// served by the design whose (K, N) equals its own; M is the design's fixed
// row count (calls are padded up to it or split into several launches).
//
// Two ways to write the table:
//   --npu-designs FILE.json
//     {"designs": [{"m": 16, "k": 1024, "n": 2048, "xclbin": "a.xclbin",
//                   "insts": "a.insts", "kernel": "MLIR_AIE", "b_layout": "kn"}]}
//     paths relative to the file; xclbin and insts optional for the
//     reference device; kernel defaults to MLIR_AIE, b_layout to kn.
//   ONEBIT_NPU_DESIGNS="16x1024x2048=a.xclbin:a.insts,16x1024x1024=b.xclbin:b.insts"
//     (the short form; paths as written; "16x1024x2048" alone for the
//     reference device).
// A malformed table is an Error naming the entry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onebit::npu {

enum class BLayout : uint8_t { kKN, kNK };

struct Design {
  int64_t m = 0, k = 0, n = 0;
  std::string xclbin;            // path; empty: none (reference device only)
  std::string insts;             // instruction stream: raw LE u32 .bin, or .txt one hex word per line
  std::string kernel = "MLIR_AIE";  // the xclbin kernel whose name starts with this
  BLayout b_layout = BLayout::kKN;
  std::string source;            // where the entry came from, for errors: "designs.json entry 2"

  std::string key() const;  // "16x1024x2048"
};

// Reads a manifest file (the JSON form).
std::vector<Design> read_manifest(const std::string& path);
// Parses the short form (ONEBIT_NPU_DESIGNS).
std::vector<Design> parse_short_form(const std::string& text);

// Reads an instruction stream: little-endian u32 words, or (a .txt file)
// one hex word per line. Errors name the file.
std::vector<uint32_t> read_instructions(const std::string& path);

// mlir-aie targets: npu (AIE2: Phoenix, Hawk Point), npu2 (AIE2P: Strix,
// Krackan, Strix Halo).
enum class Target : uint8_t { kNpu, kNpu2 };
const char* target_name(Target t);
std::optional<Target> parse_target(const std::string& name);

// The mlir-aie command that builds an int8 × int8 → int32 design for
// (M, K, N) on `target`, respecting the design's divisibility rules
// (programming_examples/basic/matrix_multiplication/{whole_array,single_core}),
// or nothing with `why` set when no tiling fits (e.g. N too large for the
// DMA descriptors).
std::optional<std::string> mlir_aie_command(int64_t m, int64_t k, int64_t n, Target target, std::string& why);

}  // namespace onebit::npu
