// The weight quantizer behind `1bit pack` (DESIGN.md "Q4NX, weight-only
// 4-bit"): a float weight W [K, N] becomes 4-bit codes [K, N] with a scale
// per (K block, column) or per column, in the layout an opset-21
// DequantizeLinear reads (axis 0 with block_size, or axis 1).
//
// Rounding rule, per block (a run of `block_size` k's of one column, or the
// whole column):
//   m      = the block's element of largest magnitude (the first on ties)
//   scale  = |m| / 8 when m < 0, |m| / 7 otherwise   (float32, then rounded
//            to float16 when float16 scales are asked for; by default also
//            when they are stored as float32, within float16's normal
//            range, so that 1bit's AVX-512 VNNI kernels can keep them as
//            float16: ~10 % fewer bytes a decode step, the same values)
//   q      = clamp(round_half_to_even(w / scale), −8, 7)   (w / scale in float32)
// so the extreme element is exact on whichever side it lies and the grid
// uses −8 too (llama.cpp's Q4_0 makes the same choice with a signed scale;
// ONNX scales here stay positive). q is what ONNX QuantizeLinear(w, scale)
// computes, clamped to int4. uint4 stores q + 8 with zero point 8: the same
// real values. An all-zero block gets scale 1 and codes 0, so nobody divides
// by a zero scale.
//
// With clip search, each block instead takes the scale of smallest squared
// error among |m|·α / d, d ∈ {7, 8}, α ∈ {1, 0.97, …, 0.76} (the default
// rule's scale is among them, so the error never grows); values past the
// clipped range saturate at −8 / 7.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onebit {

class ThreadPool;

struct Q4QuantizeOptions {
  size_t block_size = 32;      // along K; 0: one scale per column
  bool is_signed = true;       // int4 codes, else uint4 (q + 8) with zero point 8
  bool float16_scales = false;  // stored as float16 (the graph gets a Cast)
  bool half_values = true;      // float32 scales holding float16 values (normal range); false: full float32
  bool clip_search = false;
};

// The source weight: W [K, N] row-major, or its transpose stored [N, K]
// (a tied lm_head reading the embedding table through Transpose).
struct Q4Source {
  const float* data = nullptr;
  size_t k = 0, n = 0;
  bool transposed = false;  // data is [N, K]
  float at(size_t kk, size_t nn) const { return transposed ? data[nn * k + kk] : data[kk * n + nn]; }
};

struct Q4Quantized {
  size_t k = 0, n = 0, block_size = 0;
  size_t rows = 0;               // scale rows: ceil(K / block_size), or 1 per column
  std::vector<uint8_t> codes;    // ceil(K·N / 2) bytes, element k·N + n, low nibble first
  std::vector<float> scales;     // [rows][N] (already rounded to float16 when asked)
  std::vector<uint16_t> scales_f16;  // the same as float16 bits, when asked
  std::vector<uint8_t> zero_points;  // uint4: [rows][N] nibbles of 8; empty for int4
  double sum_sq_error = 0;       // Σ (w − dequant(q))²
  double sum_sq = 0;             // Σ w²
  double max_abs_error = 0;
};

// Throws onebit::Error naming `name` for a non-finite weight (with its k, n).
Q4Quantized quantize_q4(const Q4Source& w, const Q4QuantizeOptions& options, const char* name,
                        ThreadPool* pool = nullptr);

// The nibble at element i of a packed 4-bit array, as stored (0..15).
inline int q4_nibble(const uint8_t* p, size_t i) { return (p[i / 2] >> (4 * (i & 1))) & 15; }

}  // namespace onebit
