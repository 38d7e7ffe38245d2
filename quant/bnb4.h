// bitsandbytes' 4-bit formats as onnxruntime's com.microsoft::MatMulBnb4
// stores them (transformers.js' model_bnb4.onnx files): the weight
// transposed, Wᵀ [N][K], flattened and cut into blocks of `block_size`
// consecutive elements (a block may run across rows), each block one
// absmax; element i is the 4-bit code in byte i/2, the high nibble for even
// i, and means lut[code]·absmax[i / block_size] with the table of its
// quant_type: FP4 (0, a 4-bit float with bias 3) or NF4 (1, NormalFloat).
// The codes index values no integer kernel can hold, so 1bit dequantizes
// them once, at load, to float32 (each weight rounded once, as onnxruntime's
// CPU kernel does before its float GEMM).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onebit {

enum class Bnb4Type : uint8_t { kFP4 = 0, kNF4 = 1 };

// The 16 values code 0..15 means, before its block's absmax.
const float* bnb4_table(Bnb4Type type);

struct Bnb4Weight {
  size_t k = 0, n = 0, block_size = 0;
  Bnb4Type type = Bnb4Type::kNF4;
  const uint8_t* b = nullptr;       // ceil(N·K/2) bytes
  bool absmax_f16 = false;          // absmax is float16 (else float32)
  const void* absmax = nullptr;     // ceil(N·K/block_size) values, finite
};

// Wᵀ as float32 [N][K]: lut[code]·absmax. Fails naming a non-finite absmax.
std::vector<float> bnb4_dequantize_transposed(const Bnb4Weight& w);

}  // namespace onebit
