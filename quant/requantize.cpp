// Scalar A8W8 epilogue; the derivation is in quant/requantize.h. Kept out of
// line so the ISA files can call it without instantiating it under their
// flags.
#include "quant/requantize.h"

#include <cmath>
#include <cstring>

namespace onebit {

Q8Requant make_q8_requant(float s_y, int32_t zp_y, Q8Out out) {
  Q8Requant q;
  q.s_y = s_y;
  q.inv_s_y = 1.0 / double(s_y);
  q.zp_y = zp_y;
  const double qmin = out == Q8Out::kS8 ? -128.0 : 0.0, qmax = out == Q8Out::kS8 ? 127.0 : 255.0;
  q.lo = qmin - zp_y;
  q.hi = qmax - zp_y;
  return q;
}

float q8_to_f32(int32_t acc, double s) {
  const double x = double(acc);
  const double a = x * s;
  const double r = std::fma(x, s, -a);
  uint64_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  if (r != 0.0 && (bits & 1) == 0) bits = std::signbit(r) == std::signbit(a) ? bits + 1 : bits - 1;
  double odd;
  std::memcpy(&odd, &bits, sizeof odd);
  return static_cast<float>(odd);
}

double q8_resolve_tie(int32_t acc, double s, double v, double s_y) {
  const double h = std::floor(v) + 0.5;
  const double x = double(acc);
  const double a = x * s;
  const double r = std::fma(x, s, -a);
  const double e = (a - h * s_y) + r;  // sign of acc·s − h·s_y, exactly
  if (e > 0) return h + 0.5;
  if (e < 0) return h - 0.5;
  return std::nearbyint(h);  // a real tie: to even
}

int32_t q8_requantize(int32_t acc, double s, const Q8Requant& q) {
  double v = double(acc) * s * q.inv_s_y;
  v = v < q.lo ? q.lo : (v > q.hi ? q.hi : v);
  if (std::fabs(v - std::floor(v) - 0.5) <= kQ8TieWindow) v = q8_resolve_tie(acc, s, v, q.s_y);
  return static_cast<int32_t>(std::nearbyint(v)) + q.zp_y;
}

}  // namespace onebit
