// The vectorised exp and sigmoid (quant/ukernels/f32_vexp_ukernels.h), one
// ISA family per case, against double precision; the families agree with
// the scalar reference bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "quant/act_quant.h"
#include "quant/ukernels/kernel_config.h"
#include "tests/f16_conversion_util.h"
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
      for (size_t off = 0; off < 16; ++off) {
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
ONEBIT_ISA_CASE("vexp and vsigmoid against double precision", "[vec_math]", Avx512, against_double)
ONEBIT_ISA_CASE("vexp and vsigmoid equal the scalar reference bit for bit", "[vec_math]", Avx2, matches_scalar)
ONEBIT_ISA_CASE("vexp and vsigmoid equal the scalar reference bit for bit", "[vec_math]", Avx512, matches_scalar)

// argmax: every family returns the scalar reference's index (the first of
// the largest, NaN never chosen unless first, -0 == +0) on rows built to
// put the answer in the vector body, its 32-wide block boundaries and the
// tail, with ties, NaNs, infinities and signed zeros.
namespace {

// A 64-bit LCG's high bits: the rows' values, reproducible everywhere.
struct Lcg {
  uint64_t state;
  uint32_t operator()() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  }
};

void argmax_matches_scalar(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  REQUIRE(cfg);
  Lcg next{12345};
  size_t cases = 0;
  for (size_t n : {1, 2, 7, 8, 9, 31, 32, 33, 40, 63, 64, 65, 100, 1000, 49152, 151936})
    for (int kind = 0; kind < 9; ++kind)
      for (int rep = 0; rep < (n > 1000 ? 3 : 12); ++rep) {
        std::vector<float> x(n);
        for (float& v : x) v = static_cast<float>(static_cast<int>(next() % 2001) - 1000) / 64.0f;
        const size_t at = next() % n, at2 = next() % n;
        switch (kind) {
          case 0: break;                                        // random (ties among the values are likely)
          case 1: x[at] = 100.0f; x[at2] = 100.0f; break;      // a tie for the top
          case 2: x[at] = NAN; break;                           // a NaN somewhere
          case 3: x[0] = NAN; break;                            // a NaN first: the answer is 0
          case 4: for (float& v : x) v = NAN; x[at] = -1.0f; break;  // one number among NaNs
          case 5: x[at] = INFINITY; x[at2] = NAN; break;
          case 6: for (float& v : x) v = -INFINITY; break;      // all -inf: 0
          case 7: for (float& v : x) v = (next() & 1) ? 0.0f : -0.0f; break;  // zeros of both signs
          case 8: for (float& v : x) v = -static_cast<float>(next() % 7) - 1.0f; x[at] = -0.0f; x[at2] = 0.0f; break;
        }
        const size_t want = f32_vargmax_ukernel__scalar(n, x.data());
        const size_t got = cfg->argmax(n, x.data());
        INFO("n " << n << " kind " << kind << " rep " << rep);
        REQUIRE(got == want);
        ++cases;
      }
  CHECK(cases > 1000);
  // The reference itself on hand-made rows.
  const std::vector<float> a{1.0f, 3.0f, 3.0f, 2.0f}, b{NAN, 5.0f, 6.0f}, c{1.0f, NAN, 0.5f}, d{-0.0f, 0.0f};
  CHECK(f32_vargmax_ukernel__scalar(a.size(), a.data()) == 1);
  CHECK(f32_vargmax_ukernel__scalar(b.size(), b.data()) == 0);
  CHECK(f32_vargmax_ukernel__scalar(c.size(), c.data()) == 0);
  CHECK(f32_vargmax_ukernel__scalar(d.size(), d.data()) == 0);
}

}  // namespace

ONEBIT_ISA_CASE("argmax equals the scalar reference", "[vec_math][argmax]", Scalar, argmax_matches_scalar)
ONEBIT_ISA_CASE("argmax equals the scalar reference", "[vec_math][argmax]", Avx2, argmax_matches_scalar)

// Block quantization (Q4's int8-block activations): every family gives the
// scalar reference's scales, codes and sums, on rows with NaNs, infinities,
// zeros of both signs, values too small for a scale, exact halves of a
// step, block sizes of 32 (the vector path) and others, and short last
// blocks; the reference is quantize_symmetric block by block.
namespace {

void qs8_blocks_match_scalar(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  REQUIRE(cfg);
  Lcg next{777};
  size_t rows = 0;
  for (size_t kb : {32, 16, 64, 7})
    for (size_t n : {1, 8, 31, 32, 33, 64, 95, 96, 100, 1024})
      for (int kind = 0; kind < 8; ++kind)
        for (int rep = 0; rep < 6; ++rep) {
          std::vector<float> x(n);
          for (float& v : x) v = static_cast<float>(static_cast<int>(next() % 20001) - 10000) / 1000.0f;
          const size_t at = next() % n, at2 = next() % n;
          switch (kind) {
            case 0: break;
            case 1: x[at] = NAN; break;
            case 2: x[at] = INFINITY; x[at2] = -INFINITY; break;
            case 3: for (float& v : x) v = (next() & 1) ? 0.0f : -0.0f; break;
            case 4: for (float& v : x) v *= 1e-39f; break;  // a scale below FLT_MIN
            case 5: for (float& v : x) v = static_cast<float>(static_cast<int>(next() % 255) - 127) + 0.5f; x[at] = 127.0f; break;
            case 6: for (float& v : x) v = NAN; x[at] = -3.0f; break;
            case 7: x[at] = 1e30f; x[at2] = -1e-30f; break;
          }
          const size_t blocks = (n + kb - 1) / kb;
          std::vector<int8_t> q(n, 5), qw(n, 5);
          std::vector<float> s(blocks, -1.0f), sw(blocks, -1.0f);
          std::vector<int32_t> sum(blocks, -1), sumw(blocks, -1);
          cfg->qs8_blocks(n, kb, x.data(), q.data(), s.data(), sum.data());
          f32_qs8_vquant_blocks_ukernel__scalar(n, kb, x.data(), qw.data(), sw.data(), sumw.data());
          INFO("kb " << kb << " n " << n << " kind " << kind << " rep " << rep);
          REQUIRE(q == qw);
          REQUIRE(std::memcmp(s.data(), sw.data(), s.size() * sizeof(float)) == 0);
          REQUIRE(sum == sumw);
          // The reference is quantize_symmetric's quantization, block by block.
          for (size_t b = 0; b < blocks; ++b) {
            const size_t k0 = b * kb, len = std::min(kb, n - k0);
            std::vector<int8_t> qs(len);
            const float sb = quantize_symmetric(x.data() + k0, len, qs.data());
            REQUIRE(std::memcmp(&sb, &sw[b], sizeof(float)) == 0);
            REQUIRE(std::equal(qs.begin(), qs.end(), qw.begin() + static_cast<std::ptrdiff_t>(k0)));
          }
          ++rows;
        }
  CHECK(rows == 4 * 10 * 8 * 6);
}

}  // namespace

ONEBIT_ISA_CASE("qs8 blocks equal the scalar reference", "[vec_math][qs8]", Scalar, qs8_blocks_match_scalar)
ONEBIT_ISA_CASE("qs8 blocks equal the scalar reference", "[vec_math][qs8]", Avx2, qs8_blocks_match_scalar)

// A float16 export's scores chain (GqaMatMul's fused ·scale + mask): every
// family gives what the unfused nodes give, each rounding to float16 once:
// the product, the Mul by the scale, the Add of the widened mask. Rows with
// NaNs, infinities, values that overflow float16 when scaled, subnormal
// halves, both zeros; masks of 0, float16's lowest and -inf; exact and
// inexact scales; lengths around the vector width.
namespace {

void f16_scale_add_matches_nodes(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  REQUIRE(cfg);
  Lcg next{4242};
  const auto h = [](float v) { return half_to_float(float_to_half(v)); };
  const uint16_t lowest = 0xfbff, minus_inf = 0xfc00;
  size_t rows = 0;
  for (float scale : {0.125f, 0.08838835f, 1.0f, 3.0f})
    for (size_t n : {1, 7, 8, 9, 15, 16, 17, 31, 33, 300})
      for (int kind = 0; kind < 6; ++kind) {
        std::vector<float> y(n);
        std::vector<uint16_t> mask(n);
        for (size_t i = 0; i < n; ++i) {
          y[i] = static_cast<float>(static_cast<int>(next() % 20001) - 10000) / 37.0f;
          mask[i] = next() % 4 == 0 ? lowest : float_to_half(static_cast<float>(next() % 7) - 3.0f);
        }
        const size_t at = next() % n, at2 = next() % n;
        switch (kind) {
          case 0: break;
          case 1: y[at] = NAN; mask[at2] = minus_inf; break;
          case 2: y[at] = INFINITY; y[at2] = -INFINITY; break;
          case 3: for (float& v : y) v *= 6000.0f; break;  // past 65504 once scaled
          case 4: for (float& v : y) v *= 1e-7f; break;    // float16 subnormals
          case 5: y[at] = -0.0f; y[at2] = 0.0f; mask[at] = 0x8000; break;
        }
        std::vector<float> got = y, want(n);
        cfg->f16_scale_add(n, got.data(), scale, mask.data());
        for (size_t i = 0; i < n; ++i) want[i] = h(h(h(y[i]) * scale) + half_to_float(mask[i]));
        INFO("scale " << scale << " n " << n << " kind " << kind);
        size_t differ = 0;
        for (size_t i = 0; i < n; ++i)
          differ += std::isnan(want[i]) ? !std::isnan(got[i]) : std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
        CHECK(differ == 0);
        ++rows;
      }
  CHECK(rows == 4 * 10 * 6);
}

}  // namespace

ONEBIT_ISA_CASE("float16 scores: scale and mask rounded as the nodes round them", "[vec_math][f16]", Scalar,
                f16_scale_add_matches_nodes)
ONEBIT_ISA_CASE("float16 scores: scale and mask rounded as the nodes round them", "[vec_math][f16]", Avx2,
                f16_scale_add_matches_nodes)
ONEBIT_ISA_CASE("float16 scores: scale and mask rounded as the nodes round them", "[vec_math][f16]", Avx512,
                f16_scale_add_matches_nodes)

// The float16 conversions the ops call equal the scalar ones bit for bit
// (tests/f16_conversion_util.h), the float-bit sweep of inputs() narrowed too.
namespace {

void conversions_match_scalar(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  REQUIRE(cfg);
  test::check_f16_conversions(cfg->widen, cfg->narrow, inputs());
}

}  // namespace

ONEBIT_ISA_CASE("float16 conversions equal the scalar ones bit for bit", "[vec_math][f16]", Scalar,
                conversions_match_scalar)
ONEBIT_ISA_CASE("float16 conversions equal the scalar ones bit for bit", "[vec_math][f16]", Avx2,
                conversions_match_scalar)
ONEBIT_ISA_CASE("float16 conversions equal the scalar ones bit for bit", "[vec_math][f16]", Avx512,
                conversions_match_scalar)

// The float32 Softmax row (f32_vexp_ukernels.h): every ISA's kernel equals
// the scalar reference bit for bit on rows of every length to 40 and longer
// ones, plain, with a causal mask's tail (−inf, −1e30, float16's lowest,
// or values just either side of the 104 cut below the maximum), with NaN,
// ±inf, signed zeros, all −inf; in place and out of place. The reference
// itself agrees with a double-precision softmax.
namespace {

std::vector<std::vector<float>> softmax_rows() {
  Lcg next{777};
  auto uniform = [&] { return static_cast<float>(static_cast<int>(next() % 20001) - 10000) / 1000.0f; };
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 40; ++n) lengths.push_back(n);
  for (size_t n : {63, 64, 65, 100, 255, 1056}) lengths.push_back(n);
  std::vector<std::vector<float>> rows;
  for (size_t n : lengths)
    for (int kind = 0; kind < 9; ++kind) {
      std::vector<float> r(n);
      for (float& v : r) v = uniform();
      if (n == 0) {
        rows.push_back(r);
        continue;
      }
      const size_t cut = next() % n, at = next() % n;
      switch (kind) {
        case 0: break;
        case 1: std::fill(r.begin() + cut, r.end(), -INFINITY); break;
        case 2: std::fill(r.begin() + cut, r.end(), -1e30f); break;
        case 3: for (size_t i = cut; i < n; ++i) r[i] += -65504.0f; break;
        case 4: {  // around the cut: max 10, tail entries 103.99 / 104 / 104.01 below it
          r[0] = 10.0f;
          const float below[] = {-93.99f, -94.0f, -94.01f, -95.0f};
          for (size_t i = std::max<size_t>(cut, 1); i < n; ++i) r[i] = below[next() % 4];
          break;
        }
        case 5: r[at] = NAN; break;
        case 6: r[at] = INFINITY; break;
        case 7: r[at] = -0.0f, r[cut] = 0.0f; break;
        case 8: std::fill(r.begin(), r.end(), -INFINITY); break;
      }
      rows.push_back(r);
    }
  return rows;
}

bool same_row(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void softmax_matches_scalar(Isa isa) {
  const VecMathConfig* cfg = vec_math_config_for(isa);
  const VecMathConfig* ref = vec_math_config_for(Isa::Scalar);
  REQUIRE(cfg);
  size_t checked = 0;
  for (const std::vector<float>& x : softmax_rows()) {
    std::vector<float> want(x.size(), 7.0f), got(x.size(), -7.0f), inplace = x;
    ref->softmax(x.size(), x.data(), want.data());
    cfg->softmax(x.size(), x.data(), got.data());
    cfg->softmax(inplace.size(), inplace.data(), inplace.data());
    INFO("n " << x.size() << " row " << checked);
    REQUIRE(same_row(got, want));
    REQUIRE(same_row(inplace, want));
    ++checked;
  }
  CHECK(checked == 47 * 9);
}

void softmax_reference_against_double(Isa) {
  const VecMathConfig* ref = vec_math_config_for(Isa::Scalar);
  for (const std::vector<float>& x : softmax_rows()) {
    const size_t n = x.size();
    if (n == 0) continue;
    std::vector<float> y(n);
    ref->softmax(n, x.data(), y.data());
    double m = -INFINITY;
    bool nan = false;
    for (float v : x) m = std::max(m, double(v)), nan |= std::isnan(v);
    if (nan || !std::isfinite(m)) {
      // A NaN, +inf or all −inf row: NaN wherever the formula gives it.
      for (size_t i = 0; i < n; ++i)
        if (std::isnan(x[i]) || (std::isinf(m) && m > 0) || m == -INFINITY) CHECK(std::isnan(y[i]));
      continue;
    }
    double sum = 0;
    for (float v : x) sum += std::exp(double(v) - m);
    for (size_t i = 0; i < n; ++i) {
      const double want = std::exp(double(x[i]) - m) / sum;
      // A few ulp of exp and the divide, plus float's rounding of x − m
      // (half an ulp of it, carried into e^(x−m) relatively); below float's
      // normal range exp flushes to 0.
      const double tol = want * (4e-7 + std::abs(double(x[i]) - m) * 6e-8);
      if (want < 1e-37) CHECK(y[i] >= 0.0f);
      else {
        INFO("x " << x[i] << " max " << m << " y " << double(y[i]) << " want " << want);
        CHECK(std::abs(y[i] - want) <= tol);
      }
    }
  }
}

}  // namespace

ONEBIT_ISA_CASE("softmax row: the scalar reference against double precision", "[vec_math][softmax]", Scalar,
                softmax_reference_against_double)
ONEBIT_ISA_CASE("softmax row equals the scalar reference bit for bit", "[vec_math][softmax]", Avx2,
                softmax_matches_scalar)
ONEBIT_ISA_CASE("softmax row equals the scalar reference bit for bit", "[vec_math][softmax]", Avx512,
                softmax_matches_scalar)
