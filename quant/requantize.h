// The A8W8 epilogue: an exact integer accumulator `acc` times S = s_x·s_w,
// either rounded once to float32 or requantized with round-half-to-even.
//
// Why these operations (DESIGN.md "Numeric contracts", "Fused A8W8 group"):
// ONNX Runtime dequantizes to float32, multiplies in float32 and divides by
// s_y in float32, so where its arithmetic happens to be exact it returns the
// round-half-to-even of the *real* number acc·s_x·s_w/s_y. We therefore
// compute that real number's rounding exactly, always, which matches ORT
// wherever ORT is exact and differs only where ORT's own float rounding moved
// its value across (or onto) a .5 boundary.
//
//   S = (double)s_x · (double)s_w        exact: 24 + 24 significant bits ≤ 53
//   A = RN64(acc · S)                    one rounding, relative error ≤ 2⁻⁵³
//   float out:  RN32(acc · S), via round-to-odd: r = fma(acc, S, −A) is the
//               exact residual, and A nudged to the odd neighbour when r ≠ 0
//               makes the final RN32 correct (Boldo & Melquiond, "Emulation
//               of FMA and correctly rounded sums: proved algorithms using
//               rounding to odd", IEEE TC 2008).
//   quantized:  v = A · RN64(1/s_y), clamped to [qmin−zp, qmax−zp]. Its error
//               is below 4·2⁻⁵³·|v| ≤ 2⁻⁴² (|v| ≤ 2⁹ once clamped), so when v
//               is farther than kTieWindow = 2⁻²⁰ from a half-integer,
//               RNE(v) is the exact answer. Inside the window (a fraction
//               ~2⁻¹⁹ of outputs) q8_resolve_tie decides exactly: with
//               h the half-integer, T = h·s_y is exact (11 + 24 bits),
//               A − T is exact (Sterbenz: A/T ∈ [½, 2]), and the sign of
//               (A − T) + r is the exact sign of acc·S − h·s_y. So real
//               ties round to even and near-ties round the right way.
// A float32-only pipeline, (float)acc · (s_x·s_w) / s_y, rounds three or
// four times with error ~2⁻²²·|v|: about one output in 10⁴ near a boundary
// would differ from the exact rounding. Division by s_y (not multiplication
// by a precomputed s_x·s_w/s_y) is what keeps exact ties exact.
//
// Preconditions: scales are positive normal float32 numbers, so no product
// or residual underflows.
#pragma once

#include <cstdint>

namespace onebit {

// Output element type of an A8W8 GEMM.
enum class Q8Out : uint8_t { kF32, kS8, kU8 };

// Half-width of the band around x.5 in which the fast path defers to
// q8_resolve_tie (see above).
inline constexpr double kQ8TieWindow = 0x1p-20;

// Per-call requantization constants (QuantizeLinear with per-tensor s_y, zp_y).
struct Q8Requant {
  double s_y = 1.0;
  double inv_s_y = 1.0;  // RN64(1 / s_y)
  double lo = 0.0;       // qmin − zp_y
  double hi = 0.0;       // qmax − zp_y
  int32_t zp_y = 0;
};

Q8Requant make_q8_requant(float s_y, int32_t zp_y, Q8Out out);

// RN32(acc · s), s = s_x·s_w exact in double.
float q8_to_f32(int32_t acc, double s);

// saturate(RNE(acc · s / s_y) + zp_y) as an int32 in [qmin, qmax].
int32_t q8_requantize(int32_t acc, double s, const Q8Requant& q);

// The exact RNE of acc·s/s_y when v (≈ that value, within 2⁻⁴²) lies within
// kQ8TieWindow of the half-integer floor(v) + ½; returns the rounded value
// before zp_y is added. Vector epilogues call it for the rare flagged lanes.
double q8_resolve_tie(int32_t acc, double s, double v, double s_y);

}  // namespace onebit
