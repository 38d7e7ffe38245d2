// What an int8 × int8 → int32 device computes for an 8-bit GEMM, and how its
// accumulator becomes the host's exact one (DESIGN.md "Fused A8W8 group",
// "Device routing"). The device multiplies int8 by int8 only, so each
// operand is shifted into int8 first:
//
//   x' = x − bx   (bx = 128 for uint8 activations, else 0; x XOR 0x80)
//   w' = w − bw   (bw = 128 for uint8 weights, else 0)
//   D[m][n] = Σ_k x'·w'                                   (the device, exact int32)
//   acc[m][n] = Σ_k (x − zx[m])(w − zw[n])
//             = D + cx[m]·cs[n] + cw[n]·rs[m] + K·cx[m]·cw[n]
//   with cx = bx − zx, cw = bw − zw, cs[n] = Σ_k w'[k][n] (once, at bind),
//   rs[m] = Σ_k x'[m][k] (per call, only when some cw ≠ 0),
//
// evaluated in wrapping 32-bit arithmetic: every term is an integer and the
// result |acc| ≤ K·255·255 < 2³¹, so the wrapped value is the exact one.
// The host epilogue (Q8Gemm::epilogue) then runs on acc exactly as the host
// kernels' epilogue does, so device and host outputs are bit-identical
// whenever D is right.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/q8_gemm.h"

namespace onebit {

struct Q8DeviceWeight {
  size_t k = 0, n = 0;
  std::vector<int8_t> w;     // [K][N] w' = w − bw
  std::vector<int32_t> cs;   // [N] Σ_k w'[k][n]
  std::vector<int32_t> cw;   // [1 or N] bw − zw[n]
  bool any_cw = false;       // some cw ≠ 0: the per-call row sums are needed
};

// From the constant operand as the graph holds it (Q8Weight::ldw honoured).
Q8DeviceWeight q8_device_weight(const Q8Weight& w);

// The XOR that turns activations of `x` type into the device's int8.
inline uint8_t q8_device_flip(Q8Type x) { return x == Q8Type::kU8 ? 0x80 : 0; }

// acc (in place over D, row stride ldc) for the m rows of x (row stride lda,
// as the graph holds them) with activation parameters xp.
void q8_device_to_exact(size_t m, const void* x, size_t lda, Q8Type x_type, const Q8Activation& xp,
                        const Q8DeviceWeight& w, int32_t* acc, size_t ldc);

}  // namespace onebit
