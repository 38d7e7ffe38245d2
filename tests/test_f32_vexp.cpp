// The vectorised exp and sigmoid (quant/ukernels/f32_vexp_ukernels.h), one
// ISA family per case, against double precision; the families agree with
// the scalar reference bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/ukernels/kernel_config.h"
#include "tests/isa_test_util.h"

using namespace onebit;

namespace {

// Every 97th float32 bit pattern from -88 to 88 (~10^6 values, both signs),
// then the edges.
std::vector<float> inputs() {
  std::vector<float> xs;
  for (uint32_t bits = 0; bits < 0x42B00000u; bits += 97)
    for (float sign : {1.0f, -1.0f}) {
      float v;
      std::memcpy(&v, &bits, sizeof v);
      xs.push_back(sign * v);
    }
  for (float e : {NAN, -INFINITY, INFINITY, -1000.f, 1000.f, 0.f, -87.3f, -87.4f, 88.7f, 88.8f, -103.f, -104.f})
    xs.push_back(e);
  return xs;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

void against_double(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  REQUIRE(cfg);
  const std::vector<float> xs = inputs();
  std::vector<float> e(xs.size()), sig(xs.size());
  cfg->exp(xs.size(), xs.data(), e.data());
  cfg->sigmoid(xs.size(), xs.data(), sig.data());
  double worst_exp_ulp = 0, worst_sigmoid_rel = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(xs[i])) {
      CHECK(std::isnan(e[i]));
      CHECK(std::isnan(sig[i]));
      continue;
    }
    const double ref = std::exp(double(xs[i]));
    if (ref > 1.1754944e-38 && ref < 3.4e38) {  // normal float results
      const double ulp = std::nextafter(float(ref), INFINITY) - float(ref);
      worst_exp_ulp = std::max(worst_exp_ulp, std::fabs(double(e[i]) - ref) / ulp);
    } else if (ref <= 1.1754944e-38) {
      CHECK(e[i] >= 0.0f);
      CHECK(e[i] <= 1.1754944e-38f);  // 0 below FLT_MIN (flushed), never a garbage value
    } else {
      CHECK(e[i] >= 3.4e38f);
    }
    const double s = 1.0 / (1.0 + std::exp(-double(xs[i])));
    if (s > 1e-37) worst_sigmoid_rel = std::max(worst_sigmoid_rel, std::fabs(double(sig[i]) - s) / s);
    else CHECK(sig[i] < 1e-37f);
  }
  INFO(cfg->exp_name << ": worst exp error " << worst_exp_ulp << " ulp, worst sigmoid relative error "
                     << worst_sigmoid_rel);
  CHECK(worst_exp_ulp <= 1.0);
  CHECK(worst_sigmoid_rel <= 3e-7);
  // Masked attention scores: e^-inf is exactly 0; overflow is +inf.
  const float edge[] = {-INFINITY, INFINITY, -1000.f, 1000.f, 0.f};
  float out[5];
  cfg->exp(5, edge, out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == INFINITY);
  CHECK(out[2] == 0.0f);
  CHECK(out[3] == INFINITY);
  CHECK(out[4] == 1.0f);
  cfg->sigmoid(5, edge, out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 1.0f);
  CHECK(out[4] == 0.5f);
}

// Vector lanes and tails (every length 0..40, every offset) equal the scalar
// reference bit for bit.
void matches_scalar(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  const VecMathConfig* ref = vec_math_config_for(Isa::Scalar);
  REQUIRE(cfg);
  const std::vector<float> xs = inputs();
  std::vector<float> a(xs.size()), b(xs.size());
  for (auto kernel : {&VecMathConfig::exp, &VecMathConfig::sigmoid}) {
    (cfg->*kernel)(xs.size(), xs.data(), a.data());
    (ref->*kernel)(xs.size(), xs.data(), b.data());
    for (size_t i = 0; i < xs.size(); ++i)
      if (!same_bits(a[i], b[i])) FAIL("x = " << xs[i] << ": " << a[i] << " vs scalar " << b[i]);
    for (size_t n = 0; n <= 40; ++n)
      for (size_t off = 0; off < 8; ++off) {
        (cfg->*kernel)(n, xs.data() + 1000 + off, a.data());
        (ref->*kernel)(n, xs.data() + 1000 + off, b.data());
        for (size_t i = 0; i < n; ++i) REQUIRE(same_bits(a[i], b[i]));
      }
  }
  // In place (y == x), as Softmax calls it.
  std::vector<float> v(xs.begin(), xs.begin() + 100);
  cfg->exp(v.size(), v.data(), v.data());
  ref->exp(100, xs.data(), b.data());
  for (size_t i = 0; i < 100; ++i) CHECK(same_bits(v[i], b[i]));
}

}  // namespace

ONEBIT_ISA_CASE("vexp and vsigmoid against double precision", "[vec_math]", Scalar, against_double)
ONEBIT_ISA_CASE("vexp and vsigmoid against double precision", "[vec_math]", Avx2, against_double)
ONEBIT_ISA_CASE("vexp and vsigmoid equal the scalar reference bit for bit", "[vec_math]", Avx2, matches_scalar)
