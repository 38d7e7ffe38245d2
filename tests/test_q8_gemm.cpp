// A8W8 exact GEMM (quant/q8_gemm.h).
//
// Q8GemmTester (after XNNPACK's GemmMicrokernelTester) runs one problem on one
// kernel family and thread count and compares every output, bit for bit,
// with an independent reference: the accumulator straight from the formula
// Σ (x − zx)(w − zw) in int64, and the outputs as the exact rounding of the
// real number, computed with 128-bit integers (no floating point), i.e. the
// contract of quant/requantize.h. No tolerance anywhere.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "quant/q8_gemm.h"
#include "quant_test_util.h"
#include "tests/isa_test_util.h"

using namespace onebit;

namespace {

using namespace quant_test;

// saturate(RNE(acc·s_x·s_w/s_y) + zp), exactly.
int32_t ref_q(int64_t acc, float sx, float sw, float sy, int32_t zp, bool s8) {
  const Fp a = split(sx), b = split(sw), c = split(sy);
  const int d = a.exp + b.exp - c.exp;
  i128 num = i128(acc) * a.mant * b.mant, den = c.mant;
  if (d >= 0) num <<= d;
  else den <<= -d;
  const i128 q = div_rne(num, den) + zp;
  const int32_t lo = s8 ? -128 : 0, hi = s8 ? 127 : 255;
  return static_cast<int32_t>(q < lo ? lo : (q > hi ? hi : q));
}

enum class Out { kF32, kS8, kU8 };

class Q8GemmTester {
 public:
  Q8GemmTester& m(size_t v) { m_ = v; return *this; }
  Q8GemmTester& n(size_t v) { n_ = v; return *this; }
  Q8GemmTester& k(size_t v) { k_ = v; return *this; }
  Q8GemmTester& lda(size_t v) { lda_ = v; return *this; }
  Q8GemmTester& ldy(size_t v) { ldy_ = v; return *this; }
  Q8GemmTester& x_type(Q8Type v) { x_type_ = v; return *this; }
  Q8GemmTester& w_type(Q8Type v) { w_type_ = v; return *this; }
  Q8GemmTester& x_per_row(bool v) { x_per_row_ = v; return *this; }
  Q8GemmTester& w_per_col(bool v) { w_per_col_ = v; return *this; }
  Q8GemmTester& zx(int32_t v) { zx_ = v; return *this; }
  Q8GemmTester& zw(int32_t v) { zw_ = v; return *this; }
  Q8GemmTester& out(Out v) { out_ = v; return *this; }
  Q8GemmTester& zp_y(int32_t v) { zp_y_ = v; return *this; }
  Q8GemmTester& pow2_scales(bool v) { pow2_ = v; return *this; }
  Q8GemmTester& near_tie(bool v) { near_tie_ = v; return *this; }
  Q8GemmTester& extreme(bool v) { extreme_ = v; return *this; }
  Q8GemmTester& config(const Q8GemmConfig& v) { config_ = &v; return *this; }
  Q8GemmTester& pool(ThreadPool* v) { pool_ = v; return *this; }

  void test() const {
    REQUIRE(config_);
    INFO(config_->gemm_name << " m=" << m_ << " n=" << n_ << " k=" << k_ << " lda=" << lda_ << " x="
                            << (x_type_ == Q8Type::kS8 ? "s8" : "u8") << " w=" << (w_type_ == Q8Type::kS8 ? "s8" : "u8")
                            << " x_per_row=" << x_per_row_ << " w_per_col=" << w_per_col_ << " zx=" << zx_
                            << " zw=" << zw_ << " out=" << int(out_) << " zp_y=" << zp_y_ << " pow2=" << pow2_
                            << " threads=" << (pool_ ? pool_->size() : 1));
    const size_t lda = std::max(lda_, k_), ldy = std::max(ldy_, n_);
    std::mt19937 rng(static_cast<unsigned>(m_ * 7919 + n_ * 104729 + k_ * 13 + size_t(x_type_) * 3 + size_t(w_type_)));
    auto lo = [](Q8Type t) { return t == Q8Type::kS8 ? -128 : 0; };
    auto byte_dist = [&](Q8Type t) { return std::uniform_int_distribution<int>(lo(t), lo(t) + 255); };
    auto zdist = std::uniform_int_distribution<int>(-20, 20);
    auto clamp_t = [&](Q8Type t, int v) { return std::clamp(v, lo(t), lo(t) + 255); };
    auto scale = [&](float a, float b) {
      if (pow2_) return std::ldexp(1.0f, std::uniform_int_distribution<int>(-8, -4)(rng));
      return std::uniform_real_distribution<float>(a, b)(rng);
    };

    // x: M rows of lda bytes; W: K rows of N bytes.
    std::vector<uint8_t> x(m_ * lda + 1), w(k_ * n_ + 1);
    auto xd = byte_dist(x_type_);
    auto wd = byte_dist(w_type_);
    std::vector<float> sx(x_per_row_ ? m_ : 1), sw(w_per_col_ ? n_ : 1);
    std::vector<int32_t> zx(sx.size()), zw(sw.size());
    for (size_t i = 0; i < zx.size(); ++i) zx[i] = clamp_t(x_type_, zx_ + (x_per_row_ && zx_ ? zdist(rng) : 0));
    for (size_t j = 0; j < zw.size(); ++j) zw[j] = clamp_t(w_type_, zw_ + (w_per_col_ && zw_ ? zdist(rng) : 0));
    for (uint8_t& v : x) v = static_cast<uint8_t>(extreme_ ? lo(x_type_) : xd(rng));
    for (uint8_t& v : w) v = static_cast<uint8_t>(extreme_ ? lo(w_type_) : wd(rng));
    for (float& s : sx) s = scale(0.004f, 0.05f);
    for (float& s : sw) s = scale(0.001f, 0.02f);
    auto X = [&](size_t i, size_t kk) {
      return x_type_ == Q8Type::kS8 ? int32_t(int8_t(x[i * lda + kk])) : int32_t(x[i * lda + kk]);
    };
    auto W = [&](size_t kk, size_t j) {
      return w_type_ == Q8Type::kS8 ? int32_t(int8_t(w[kk * n_ + j])) : int32_t(w[kk * n_ + j]);
    };
    auto ZX = [&](size_t i) { return zx[x_per_row_ ? i : 0]; };
    auto ZW = [&](size_t j) { return zw[w_per_col_ ? j : 0]; };
    auto SX = [&](size_t i) { return sx[x_per_row_ ? i : 0]; };
    auto SW = [&](size_t j) { return sw[w_per_col_ ? j : 0]; };

    std::vector<int64_t> acc(m_ * n_);
    float amax = 0.0f;
    for (size_t i = 0; i < m_; ++i)
      for (size_t j = 0; j < n_; ++j) {
        int64_t s = 0;
        for (size_t kk = 0; kk < k_; ++kk) s += int64_t(X(i, kk) - ZX(i)) * int64_t(W(kk, j) - ZW(j));
        acc[i * n_ + j] = s;
        amax = std::max(amax, std::fabs(float(s) * SX(i) * SW(j)));
      }
    // Output scale: outputs span about ±100 steps; or, for near ties, the
    // value of output (0, 0) lands within 2⁻²⁴ relative of a .5.
    float sy = pow2_ ? std::ldexp(1.0f, std::uniform_int_distribution<int>(-14, -8)(rng)) : amax / 100.0f;
    if (near_tie_ && acc[0] != 0) sy = float(double(acc[0]) * SX(0) * SW(0) / (std::trunc(100.0 * (acc[0] > 0 ? 1 : -1) / 3) + 0.5));
    if (!(sy > 0)) sy = 1.0f;

    Q8Weight aw;
    aw.k = k_;
    aw.n = n_;
    aw.type = w_type_;
    aw.data = w.data();
    aw.scale = sw.data();
    aw.scale_count = sw.size();
    aw.zero_point = zw_ || w_per_col_ ? zw.data() : nullptr;
    aw.zero_point_count = zw.size();
    aw.x_type = x_type_;
    const Q8Gemm gemm(*config_, aw, pool_);
    Q8Activation ap;
    ap.scale = sx.data();
    ap.scale_count = sx.size();
    ap.zero_point = zx_ || x_per_row_ ? zx.data() : nullptr;
    ap.zero_point_count = zx.size();
    auto ws = workspace(gemm.workspace_bytes(m_));

    size_t bad = 0;
    if (out_ == Out::kF32) {
      std::vector<float> y(m_ * ldy, -12345.0f);
      gemm.run(m_, x.data(), lda, ap, y.data(), ldy, ws.get(), pool_);
      for (size_t i = 0; i < m_; ++i)
        for (size_t j = 0; j < ldy; ++j) {
          const float want = j < n_ ? ref_f32(acc[i * n_ + j], SX(i), SW(j)) : -12345.0f;
          if (std::memcmp(&y[i * ldy + j], &want, 4) != 0 && bad++ < 5)
            FAIL_CHECK("y[" << i << "][" << j << "] = " << y[i * ldy + j] << ", expected " << want << " (acc "
                            << acc[i * n_ + j] << ")");
        }
    } else {
      const bool s8 = out_ == Out::kS8;
      Q8OutputQuant rq{sy, zp_y_, s8 ? Q8Type::kS8 : Q8Type::kU8};
      std::vector<uint8_t> y(m_ * ldy, 0xA5);
      gemm.run(m_, x.data(), lda, ap, rq, y.data(), ldy, ws.get(), pool_);
      for (size_t i = 0; i < m_; ++i)
        for (size_t j = 0; j < ldy; ++j) {
          const int32_t want = j < n_ ? ref_q(acc[i * n_ + j], SX(i), SW(j), sy, zp_y_, s8) : (s8 ? int8_t(0xA5) : 0xA5);
          const int32_t got = s8 ? int32_t(int8_t(y[i * ldy + j])) : int32_t(y[i * ldy + j]);
          if (got != want && bad++ < 5)
            FAIL_CHECK("y[" << i << "][" << j << "] = " << got << ", expected " << want << " (acc "
                            << acc[i * n_ + j] << ", s_y " << sy << ")");
        }
    }
    CHECK(bad == 0);
    const bool asymmetric = std::any_of(zx.begin(), zx.end(), [](int32_t z) { return z != 0; });
    CHECK(gemm.colsum_computations() == (ap.zero_point && asymmetric ? 1 : 0));
  }

 private:
  size_t m_ = 1, n_ = 1, k_ = 1, lda_ = 0, ldy_ = 0;
  Q8Type x_type_ = Q8Type::kS8, w_type_ = Q8Type::kS8;
  bool x_per_row_ = false, w_per_col_ = false, pow2_ = false, near_tie_ = false, extreme_ = false;
  int32_t zx_ = 0, zw_ = 0, zp_y_ = 0;
  Out out_ = Out::kF32;
  const Q8GemmConfig* config_ = nullptr;
  ThreadPool* pool_ = nullptr;
};

}  // namespace

TEST_CASE("q8 gemm: requantize helpers equal the exact rounding, near ties included", "[q8]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> accd(-3000000, 3000000);
  std::uniform_real_distribution<float> sd(0.001f, 0.05f);
  std::uniform_int_distribution<int> qd(-120, 120);
  int near = 0;
  for (int it = 0; it < 200000; ++it) {
    const int32_t acc = accd(rng);
    const float sx = sd(rng), sw = sd(rng) / 8;
    const double s = double(sx) * double(sw);
    // s_y puts acc·s/s_y within about 2⁻²⁴ of the half-integer q + ½.
    const float sy = it % 2 ? float(double(acc) * s / (qd(rng) + 0.5)) : sd(rng) / 4;
    if (!(sy > 0)) continue;
    const Q8Requant rq = make_q8_requant(sy, -7, Q8Out::kS8);
    const double v = double(acc) * s / sy;
    near += std::fabs(v - std::floor(v) - 0.5) <= kQ8TieWindow;
    REQUIRE(q8_requantize(acc, s, rq) == ref_q(acc, sx, sw, sy, -7, true));
    REQUIRE(q8_to_f32(acc, s) == ref_f32(acc, sx, sw));
  }
  CHECK(near > 10000);  // the slow path was exercised
  // A real tie rounds to even: 5·2⁻¹ = 2.5 → 2, 7·2⁻¹ = 3.5 → 4, −2.5 → −2.
  const Q8Requant half = make_q8_requant(1.0f, 0, Q8Out::kS8);
  CHECK(q8_requantize(5, 0.5, half) == 2);
  CHECK(q8_requantize(7, 0.5, half) == 4);
  CHECK(q8_requantize(-5, 0.5, half) == -2);
}

namespace {

// "q8 gemm tile edges (M, N, K around MR, NR, the packing group)"
void isa_case_1(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg); {
    const size_t mr = cfg->mr, nr = cfg->nr;
    for (size_t m : {size_t{1}, size_t{2}, mr - 1, mr, mr + 1, size_t{33}})
      for (size_t n : {size_t{1}, nr - 1, nr, nr + 1, cfg->gemm_nc - 1, cfg->gemm_nc + 1, 2 * nr + 3, cfg->gemv_nc + 5})
        for (size_t k : {1, 3, 4, 5, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000})
          Q8GemmTester().m(m).n(n).k(k).zx(-40).zw(-25).config(*cfg).test();
  }
}

// "q8 gemm dtypes, zero points, per-tensor and per-axis, outputs"
void isa_case_2(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (Q8Type xt : {Q8Type::kS8, Q8Type::kU8})
      for (Q8Type wt : {Q8Type::kS8, Q8Type::kU8})
        for (int zp_case = 0; zp_case < 3; ++zp_case)
          for (bool axes : {false, true})
            for (Out out : {Out::kF32, Out::kS8, Out::kU8}) {
              // zp_case 0: symmetric; 1: zx = −40 / zw = −25 (uint8: 100 / 140); 2: zx only.
              const int32_t zx = zp_case == 0 ? 0 : (xt == Q8Type::kS8 ? -40 : 100);
              const int32_t zw = zp_case != 1 ? 0 : (wt == Q8Type::kS8 ? -25 : 140);
              const int32_t zp_y = out == Out::kS8 ? -7 : (out == Out::kU8 ? 130 : 0);
              for (size_t m : {size_t{1}, size_t{11}})
                Q8GemmTester().m(m).n(37).k(77).x_type(xt).w_type(wt).zx(zx).zw(zw).x_per_row(axes).w_per_col(axes)
                    .out(out).zp_y(zp_y).config(*cfg).test();
            }
}

// "q8 gemm strided activations and outputs"
void isa_case_3(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (size_t m : {size_t{1}, size_t{9}})
      for (Out out : {Out::kF32, Out::kU8})
        Q8GemmTester().m(m).n(45).k(70).lda(83).ldy(51).zx(3).zw(-2).x_per_row(true).out(out).zp_y(77).config(*cfg).test();
}

// "q8 gemm one and two threads"
void isa_case_4(Isa isa) {
  ThreadPool two(2);
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
      Q8GemmTester().m(1).n(1000).k(1024).zx(-40).zw(-25).out(Out::kS8).zp_y(-7).config(*cfg).pool(pool).test();
      Q8GemmTester().m(70).n(300).k(257).x_per_row(true).w_per_col(true).zx(-40).zw(-25).config(*cfg).pool(pool).test();
      Q8GemmTester().m(70).n(300).k(257).x_type(Q8Type::kU8).zx(128).out(Out::kU8).zp_y(130).config(*cfg).pool(pool).test();
    }
}

// "q8 gemm exact ties round to even (power-of-two scales)"
void isa_case_5(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (Out out : {Out::kS8, Out::kU8})
      for (size_t m : {size_t{1}, size_t{20}})
        Q8GemmTester().m(m).n(40).k(50).pow2_scales(true).zx(5).zw(-3).out(out).zp_y(out == Out::kS8 ? -7 : 128)
            .config(*cfg).test();
}

// "q8 gemm near ties resolve exactly in the vector epilogues"
void isa_case_6(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (size_t m : {size_t{1}, size_t{12}})
      Q8GemmTester().m(m).n(33).k(100).near_tie(true).zx(-40).zw(-25).out(Out::kS8).zp_y(-7).config(*cfg).test();
}

// "q8 gemm largest K is exact, one more is refused"
void isa_case_7(Isa isa) {
  // x − zx = −255 and w − zw = −255 everywhere: acc = K·65025, just under 2³¹.
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (size_t m : {size_t{1}, size_t{3}})
      Q8GemmTester().m(m).n(17).k(kQ8MaxK).x_type(Q8Type::kS8).w_type(Q8Type::kS8).zx(127).zw(127).extreme(true)
          .config(*cfg).test();
  std::vector<int8_t> w(kQ8MaxK + 1);
  const float one = 1.0f;
  Q8Weight aw;
  aw.k = kQ8MaxK + 1;
  aw.n = 1;
  aw.data = w.data();
  aw.scale = &one;
  CHECK_THROWS_AS(Q8Gemm(aw), Error);
}

// "q8 gemm a symmetric graph never computes the weight column sums"
void isa_case_8(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg); {
    const size_t k = 64, n = 40, m = 5;
    std::vector<int8_t> w(k * n, 3), x(m * k, -2);
    const float sw = 0.01f, sx = 0.02f;
    const int32_t zw = 4, zx_zero = 0, zx = -40;
    Q8Weight aw;
    aw.k = k;
    aw.n = n;
    aw.data = w.data();
    aw.scale = &sw;
    aw.zero_point = &zw;  // a weight zero point alone needs only row sums
    const Q8Gemm gemm(*cfg, aw);
    auto ws = workspace(gemm.workspace_bytes(m));
    std::vector<float> y(m * n);
    Q8Activation a{&sx, 1, nullptr, 1};
    gemm.run(m, x.data(), k, a, y.data(), n, ws.get(), nullptr);
    a.zero_point = &zx_zero;
    gemm.run(1, x.data(), k, a, y.data(), n, ws.get(), nullptr);
    CHECK(gemm.colsum_computations() == 0);
    CHECK(y[0] == ref_f32(int64_t(k) * (-2) * (3 - 4), sx, sw));
    a.zero_point = &zx;
    gemm.run(m, x.data(), k, a, y.data(), n, ws.get(), nullptr);
    gemm.run(m, x.data(), k, a, y.data(), n, ws.get(), nullptr);
    CHECK(gemm.colsum_computations() == 1);
    CHECK(y[n + 1] == ref_f32(int64_t(k) * (-2 + 40) * (3 - 4), sx, sw));
  }
}

// "q8 pack ukernel equals its scalar twin"
void isa_case_9(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
  const Q8PackUkernel twin = cfg->kr == 2 ? q8_pack_ukernel_c2__scalar : q8_pack_ukernel_c4__scalar;
  REQUIRE((cfg->kr == 2 || cfg->kr == 4));
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t groups : {1, 3, 64})
    for (size_t extra : {size_t{0}, size_t{5}})  // row stride beyond the panel
      for (uint8_t flip : {uint8_t{0}, uint8_t{0x80}}) {
        const size_t nr = cfg->nr, ldw = nr + extra;
        INFO(cfg->pack_name << " groups=" << groups << " ldw=" << ldw << " flip=" << int(flip));
        std::vector<uint8_t> src(groups * cfg->kr * ldw);
        for (uint8_t& v : src) v = static_cast<uint8_t>(byte(rng));
        std::vector<uint8_t> want(groups * cfg->kr * nr), got(want.size(), 0xEE);
        twin(src.data(), ldw, groups, nr, flip, want.data());
        cfg->pack(src.data(), ldw, groups, nr, flip, got.data());
        CHECK(want == got);
      }
}

}  // namespace

// One case per distinct Q8GemmConfig family.
#define Q8_ISA_CASES(name, tags, body) \
  ONEBIT_ISA_CASE(name, tags, Scalar, body) \
  ONEBIT_ISA_CASE(name, tags, Avx2, body) \
  ONEBIT_ISA_CASE(name, tags, Avx512Vnni, body) \
  ONEBIT_ISA_CASE(name, tags, Amx, body)

Q8_ISA_CASES("q8 gemm tile edges (M, N, K around MR, NR, the packing group)", "[q8]", isa_case_1)

Q8_ISA_CASES("q8 gemm dtypes, zero points, per-tensor and per-axis, outputs", "[q8]", isa_case_2)

Q8_ISA_CASES("q8 gemm strided activations and outputs", "[q8]", isa_case_3)

Q8_ISA_CASES("q8 gemm one and two threads", "[q8]", isa_case_4)

Q8_ISA_CASES("q8 gemm exact ties round to even (power-of-two scales)", "[q8]", isa_case_5)

Q8_ISA_CASES("q8 gemm near ties resolve exactly in the vector epilogues", "[q8]", isa_case_6)

Q8_ISA_CASES("q8 gemm largest K is exact, one more is refused", "[q8]", isa_case_7)

Q8_ISA_CASES("q8 gemm a symmetric graph never computes the weight column sums", "[q8]", isa_case_8)

Q8_ISA_CASES("q8 pack ukernel equals its scalar twin", "[q8]", isa_case_9)

TEST_CASE("q8 gemm: bad parameters are errors that name the value", "[q8]") {
  std::vector<int8_t> w(4 * 3);
  const float scales[3] = {0.1f, 0.2f, 0.3f}, bad = -1.0f;
  const int32_t zp_out_of_range = 200;
  Q8Weight aw;
  aw.k = 4;
  aw.n = 3;
  aw.data = w.data();
  aw.scale = scales;
  aw.scale_count = 2;
  CHECK_THROWS_WITH(Q8Gemm(aw), Catch::Contains("expected 1 (per tensor) or 3"));
  aw.scale_count = 1;
  aw.scale = &bad;
  CHECK_THROWS_WITH(Q8Gemm(aw), Catch::Contains("positive normal"));
  aw.scale = scales;
  aw.zero_point = &zp_out_of_range;
  CHECK_THROWS_WITH(Q8Gemm(aw), Catch::Contains("in [-128, 127]"));
}

TEST_CASE("q8 gemm: a decode row on several streams a thread, every output exact", "[q8][streams]") {
  // The streams path (shares of the panels, sub-ranges read side by side)
  // and the family's one-stream gemv (the config without gemv_streams) each
  // against the exact reference: shares and sub-ranges of uneven length,
  // a last panel cut short, outputs float and requantized, one and two threads.
  // Every variant (the VNNI family's two decode prefetches, one of which
  // this CPU is not given).
  int checked = 0, variants = 0;
  ThreadPool two(2);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni})
  for (const Q8GemmConfig* cfg : q8_gemm_config_variants(isa)) {
    if (!cfg->gemv_streams[0]) continue;  // the family decodes on its gemv
    ++variants;
    INFO(cfg->gemv_streams_name);
    REQUIRE(cfg->streams >= 1);
    REQUIRE(cfg->streams <= kQ8Streams);
    Q8GemmConfig plain = *cfg;
    plain.gemv_streams[0] = plain.gemv_streams[1] = nullptr;
    for (const Q8GemmConfig* c : {cfg, static_cast<const Q8GemmConfig*>(&plain)})
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two})
        for (size_t n : {size_t{5}, size_t{16 * 7 + 3}, size_t{1000}, size_t{4099}}) {
          INFO("streams " << (c == cfg) << " n " << n << " threads " << (pool ? 2 : 1));
          Q8GemmTester().m(1).n(n).k(257).zx(-40).zw(-25).out(Out::kS8).zp_y(-7).config(*c).pool(pool).test();
          Q8GemmTester().m(1).n(n).k(64).x_type(Q8Type::kU8).zx(128).w_per_col(true).config(*c).pool(pool).test();
          ++checked;
        }
  }
  if (cpu_supports(Isa::Avx512Vnni)) {
    CHECK(checked > 0);
    CHECK(variants == 2);  // the VNNI family's two prefetches (AVX2 decodes on its gemv)
  }
}

TEST_CASE("q8 gemm: the VNNI decode prefetch follows the CPU generation", "[q8][streams]") {
  // Into L2 on AMD before family 0x1A (Zen 4), into L1 elsewhere.
  if (const Q8GemmConfig* cfg = q8_gemm_config_for(Isa::Avx512Vnni)) {
    const CpuFeatures& f = cpu_features();
    INFO("amd " << f.amd() << " family " << f.family << " " << cfg->gemv_streams_name);
    const std::string want =
        std::string("q8_gemv_streams_ukernel_1x16s4__avx512vnni") + (f.amd() && f.family < 0x1A ? "_l2" : "");
    CHECK(cfg->gemv_streams_name == want);
  }
}
