// The one vectorised exponential, and the sigmoid built on it (SiLU's
// Sigmoid runs on every MLP activation of every step; Softmax on every
// attention row). Named after XNNPACK's f32_vexp / f32_vsigmoid; picked by
// quant/ukernels/kernel_config.cpp (VecMathConfig), never by an op.
//
// e^x for float32, within 1 ulp of the correctly rounded value wherever the
// result is a normal float: Cody–Waite reduction x = n·ln2 + r with
// |r| <= ln2/2, the Cephes degree-6 polynomial for e^r, then 2^n from
// exponent bits in two halves (n reaches 128). Outside the normal range the
// result is what float32 exp rounds to with denormals flushed: 0 below
// ln(FLT_MIN) ≈ -87.34 (so e^-inf, a masked attention score, is exactly 0),
// +inf above ln(FLT_MAX) ≈ 88.72; NaN stays NaN.
//
// exp_f32 is the scalar element; the __scalar kernels loop over it and the
// __avx2 and __avx512 kernels use it for their tails, doing the same float operations in
// the same order as their vector body, so every element gets the same
// result wherever it falls (tested bit for bit).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace onebit {

namespace exp_detail {
inline constexpr float kLo = -87.3365f, kHi = 88.7228f, kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_detail

inline float exp_f32(float x) {
  using namespace exp_detail;
  float v = x > kLo ? x : kLo;  // as maxps/minps: a NaN becomes kLo
  v = v < kHi ? v : kHi;
  const float n = std::nearbyint(v * kLog2e);
  float r = v - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = p * r + kP[i];
  const float er = p * (r * r) + r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n), half = ni >> 1;
  const int32_t bits_a = (half + 127) << 23, bits_b = (ni - half + 127) << 23;
  float a, b;
  std::memcpy(&a, &bits_a, sizeof a);
  std::memcpy(&b, &bits_b, sizeof b);
  float y = er * a * b;
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? INFINITY : y;
  return x == x ? y : x;
}

// y[i] = e^x[i] for i < n (y may be x).
using F32VUnaryUkernel = void (*)(size_t n, const float* x, float* y);

void f32_vexp_ukernel__scalar(size_t n, const float* x, float* y);
void f32_vexp_ukernel__avx2(size_t n, const float* x, float* y);
void f32_vexp_ukernel__avx512(size_t n, const float* x, float* y);
// A float32 Softmax row of n entries (the Softmax op's rows along the last
// axis, and the fused attention chains that must equal them; ops/softmax.h):
//   m = the largest entry, NaN if any entry is NaN;
//   used = n, or, when m is finite, one past the last entry x[k] with
//     x[k] − m ≥ kSoftmaxNegligible (those after have e^(x−m) exactly 0: a
//     causal mask's), rounded up to whole groups of kSoftmaxGroup, at most n;
//   y[k] = e^(x[k] − m) (exp_f32) for k < used, summed in double: lane j
//     over the entries k ≡ j mod 8 of the whole groups of 8, in order; the
//     entries past them one by one into the total; then lanes 0…7 added to
//     it in order;
//   y[k] = y[k] / float(total) for k < used, 0 from used on.
// Every ISA's kernel computes exactly this (tested bit for bit). x may be y.
inline constexpr float kSoftmaxNegligible = -104.0f;
inline constexpr size_t kSoftmaxGroup = 8;
using F32VSoftmaxUkernel = void (*)(size_t n, const float* x, float* y);

// The scalar steps every Softmax row kernel shares (each ISA's vector body
// ends where they take over), so the row's order of operations is written
// once:
// m: the running max `m` of the entries before k (`nan`: one of them was
// NaN) carried over x[k, n); NaN if any entry is.
inline float softmax_max(const float* x, size_t k, size_t n, float m, bool nan) {
  for (; k < n; ++k) {
    m = x[k] > m ? x[k] : m;
    nan |= x[k] != x[k];
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}
// used: given that every entry from e on lies below the cut, one past the
// last that does not, rounded up to whole groups, at most n.
inline size_t softmax_used(const float* x, size_t n, float m, size_t e) {
  while (e > 0 && x[e - 1] - m < kSoftmaxNegligible) --e;
  const size_t used = (e + kSoftmaxGroup - 1) / kSoftmaxGroup * kSoftmaxGroup;
  return used < n ? used : n;
}
// The total as float: y[k, used) = e^(x − m) one by one into it, then the
// eight lane sums `lanes` added in order.
inline float softmax_total(const float* x, float* y, size_t k, size_t used, float m, const double* lanes) {
  double sum = 0;
  for (; k < used; ++k) {
    y[k] = exp_f32(x[k] - m);
    sum += static_cast<double>(y[k]);
  }
  for (size_t j = 0; j < kSoftmaxGroup; ++j) sum += lanes[j];
  return static_cast<float>(sum);
}

void f32_vsoftmax_ukernel__scalar(size_t n, const float* x, float* y);
void f32_vsoftmax_ukernel__avx2(size_t n, const float* x, float* y);
void f32_vsoftmax_ukernel__avx512(size_t n, const float* x, float* y);

// y[i] = 1 / (1 + e^-x[i]).
void f32_vsigmoid_ukernel__scalar(size_t n, const float* x, float* y);
void f32_vsigmoid_ukernel__avx2(size_t n, const float* x, float* y);
void f32_vsigmoid_ukernel__avx512(size_t n, const float* x, float* y);

}  // namespace onebit
