// Q4NX GEMM (quant/q4_gemm.h).
//
// Q4Tester draws 4-bit weights (int4 or uint4, blocked or per channel, with
// or without zero points, float or float16 scales), builds both source
// layouts from them (opset-21 [K,N] nibbles and MatMulNBits), and checks:
//   1. the two packers produce the same packed codes and the same outputs;
//   2. every kernel family equals a naive reference that follows the
//      operation sequence of quant/ukernels/q4_ukernels.h from the unpacked weights
//      and the public row quantizers — bit for bit (compared with ==, so
//      only the sign of an exact zero may differ): the integer dot products
//      are exact and every float step happens in the same order;
//   3. against float64 X·dequant(W) the error stays within what the
//      activation precision allows: for int8 modes, half an activation step
//      times Σ|w| (plus float rounding); for float, the summation bound
//      2(K+4)·u·Σ|x·w| (Higham, "Accuracy and Stability of Numerical
//      Algorithms", §3.1), u = 2⁻²⁴.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "quant/act_quant.h"
#include "quant/gemm_parallel.h"
#include "quant/q4_gemm.h"
#include "quant_test_util.h"
#include "tests/isa_test_util.h"

using namespace onebit;

namespace {

using namespace quant_test;

void put_nibble(std::vector<uint8_t>& v, size_t i, int value) {
  v[i / 2] = static_cast<uint8_t>(i % 2 ? (v[i / 2] & 0x0F) | ((value & 15) << 4) : (v[i / 2] & 0xF0) | (value & 15));
}

size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }

const char* act_name(Q4Act a) {
  return a == Q4Act::kInt8Row ? "int8-row" : (a == Q4Act::kInt8Block ? "int8-block" : "float");
}

class Q4Tester {
 public:
  Q4Tester& m(size_t v) { m_ = v; return *this; }
  Q4Tester& n(size_t v) { n_ = v; return *this; }
  Q4Tester& k(size_t v) { k_ = v; return *this; }
  Q4Tester& lda(size_t v) { lda_ = v; return *this; }
  Q4Tester& ldy(size_t v) { ldy_ = v; return *this; }
  Q4Tester& is_signed(bool v) { signed_ = v; return *this; }
  Q4Tester& block_size(size_t v) { bs_ = v; return *this; }
  Q4Tester& zero_points(bool v) { zp_ = v; return *this; }
  Q4Tester& f16_scales(bool v) { f16_ = v; return *this; }
  Q4Tester& bias(bool v) { bias_ = v; return *this; }
  Q4Tester& act(Q4Act v) { act_ = v; return *this; }
  Q4Tester& int8_block(size_t v) { int8_block_ = v; return *this; }
  Q4Tester& nbits_zero_points(Q4MatMulNBitsWeight::ZeroPoints v) { nbits_zp_ = v; return *this; }
  Q4Tester& config(const Q4GemmConfig& v) { config_ = &v; return *this; }
  Q4Tester& pool(ThreadPool* v) { pool_ = v; return *this; }

  void test() const {
    REQUIRE(config_);
    INFO(config_->gemm_name[int(act_)] << " act=" << act_name(act_) << " m=" << m_ << " n=" << n_ << " k=" << k_
                                       << " lda=" << lda_ << " signed=" << signed_ << " bs=" << bs_ << " zp=" << zp_
                                       << " f16=" << f16_ << " bias=" << bias_
                                       << " threads=" << (pool_ ? pool_->size() : 1));
    std::mt19937 rng(static_cast<unsigned>(m_ * 7919 + n_ * 104729 + k_ * 13 + bs_ * 7 + signed_ + 2 * zp_));
    const size_t rows = bs_ ? div_up(k_, bs_) : 1, lda = std::max(lda_, k_), ldy = std::max(ldy_, n_);
    const int wlo = signed_ ? -8 : 0;
    std::uniform_int_distribution<int> wd(wlo, wlo + 15);
    std::uniform_real_distribution<float> sd(0.01f, 0.1f), xd(-1.0f, 1.0f);

    // Logical weights: w[k][n], z[r][n] in W's type; s[r][n] float.
    std::vector<int> w(k_ * n_), z(rows * n_, signed_ ? 0 : 8);
    std::vector<float> s(rows * n_);
    for (int& v : w) v = wd(rng);
    if (zp_)
      for (int& v : z) v = wd(rng);
    std::vector<uint16_t> s16(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      const float v = sd(rng) * (i % 3 == 0 ? -1.0f : 1.0f);
      s16[i] = float_to_half(v);
      s[i] = f16_ ? half_to_float(s16[i]) : v;
    }
    std::vector<float> x(m_ * lda + 1), bias(n_);
    for (float& v : x) v = xd(rng);
    for (float& v : bias) v = xd(rng);

    // Opset-21 layout.
    std::vector<uint8_t> data(div_up(k_ * n_, 2)), zdata(div_up(rows * n_, 2));
    for (size_t i = 0; i < w.size(); ++i) put_nibble(data, i, w[i]);
    for (size_t i = 0; i < z.size(); ++i) put_nibble(zdata, i, z[i]);
    Q4OnnxWeight ow;
    ow.k = k_;
    ow.n = n_;
    ow.is_signed = signed_;
    ow.data = data.data();
    ow.block_size = bs_;
    ow.scale_type = f16_ ? Q4FloatType::kF16 : Q4FloatType::kF32;
    ow.scales = f16_ ? static_cast<const void*>(s16.data()) : s.data();
    ow.zero_points = zp_ ? zdata.data() : nullptr;
    Q4GemmOptions opt;
    opt.act = act_;
    opt.int8_block = int8_block_;
    opt.bias = bias_ ? bias.data() : nullptr;
    const Q4Gemm gemm(*config_, ow, opt, pool_);

    // Shifted codes and zero points, c − z' = w − z (quant/ukernels/q4_ukernels.h).
    auto C = [&](size_t kk, size_t j) { return signed_ ? w[kk * n_ + j] + 8 : w[kk * n_ + j]; };
    auto Zs = [&](size_t r, size_t j) { return signed_ ? z[r * n_ + j] + 8 : z[r * n_ + j]; };
    auto row_of = [&](size_t kk) { return bs_ ? kk / bs_ : 0; };

    // The same weights as MatMulNBits (blocked only: it has no per-channel form).
    if (bs_) {
      const size_t blob = bs_ / 2, zbytes = div_up(rows, 2);
      std::vector<uint8_t> b(n_ * rows * blob), zp8(n_ * zbytes);
      std::vector<float> sn(n_ * rows), zf(n_ * rows);
      std::vector<uint16_t> sn16(n_ * rows), zf16(n_ * rows);
      for (size_t j = 0; j < n_; ++j) {
        for (size_t kk = 0; kk < k_; ++kk) {
          const size_t byte = (j * rows + kk / bs_) * blob + (kk % bs_) / 2;
          b[byte] = static_cast<uint8_t>(kk % 2 ? (b[byte] & 0x0F) | (C(kk, j) << 4) : (b[byte] & 0xF0) | C(kk, j));
        }
        for (size_t r = 0; r < rows; ++r) {
          sn[j * rows + r] = s[r * n_ + j];
          sn16[j * rows + r] = s16[r * n_ + j];
          const int zz = zp_ || !signed_ ? Zs(r, j) : 8;
          zf[j * rows + r] = float(zz);
          zf16[j * rows + r] = float_to_half(float(zz));
          uint8_t& byte = zp8[j * zbytes + r / 2];
          byte = static_cast<uint8_t>(r % 2 ? (byte & 0x0F) | (zz << 4) : (byte & 0xF0) | zz);
        }
      }
      using Z = Q4MatMulNBitsWeight::ZeroPoints;
      Q4MatMulNBitsWeight nw;
      nw.k = k_;
      nw.n = n_;
      nw.block_size = bs_;
      nw.b = b.data();
      nw.scale_type = ow.scale_type;
      nw.scales = f16_ ? static_cast<const void*>(sn16.data()) : sn.data();
      nw.zero_point_type = zp_ || !signed_ ? nbits_zp_ : Z::kNone;
      nw.zero_points = nw.zero_point_type == Z::kPacked ? static_cast<const void*>(zp8.data())
                       : nw.zero_point_type == Z::kF16  ? static_cast<const void*>(zf16.data())
                                                        : zf.data();
      const Q4Gemm from_nbits(*config_, nw, opt, pool_);
      REQUIRE(from_nbits.weight_bytes() == gemm.weight_bytes());
      CHECK(std::memcmp(from_nbits.packed_codes().as<uint8_t>(), gemm.packed_codes().as<uint8_t>(),
                        gemm.packed_codes().bytes()) == 0);
      std::vector<float> y1(m_ * ldy), y2(m_ * ldy);
      auto ws = workspace(gemm.workspace_bytes(m_));
      gemm.run(m_, x.data(), lda, y1.data(), ldy, ws.get(), pool_);
      from_nbits.run(m_, x.data(), lda, y2.data(), ldy, ws.get(), pool_);
      for (size_t i = 0; i < m_ * ldy; i += ldy) REQUIRE(std::equal(&y1[i], &y1[i] + n_, &y2[i]));
    }

    // Run, through the per-call override of the precision as well.
    const float sentinel = -777.0f;
    std::vector<float> y(m_ * ldy, sentinel), y_override(m_ * ldy, sentinel);
    auto ws = workspace(gemm.workspace_bytes(m_, act_));
    gemm.run(m_, x.data(), lda, y.data(), ldy, ws.get(), pool_);
    const Q4Act other = act_ == Q4Act::kFloat ? Q4Act::kInt8Row : Q4Act::kFloat;
    auto ws2 = workspace(gemm.workspace_bytes(m_, other));
    gemm.run(m_, other, x.data(), lda, y_override.data(), ldy, ws2.get(), pool_);  // must not disturb
    gemm.run(m_, act_, x.data(), lda, y_override.data(), ldy, ws.get(), pool_);
    CHECK(y == y_override);

    // The naive reference, operation for operation.
    const size_t kp = gemm.padded_k();
    const size_t kb = bs_ ? bs_ : (act_ == Q4Act::kInt8Block ? int8_block_ : kp), blocks = div_up(kp, kb);
    bool any_zero = false;
    for (size_t r = 0; r < rows; ++r)
      for (size_t j = 0; j < n_; ++j) any_zero |= Zs(r, j) != 8;
    auto zprime = [&](size_t r, size_t j) { return r < rows ? Zs(r, j) : 8; };
    auto scale_of = [&](size_t r, size_t j) { return r < rows ? s[r * n_ + j] : 0.0f; };
    auto weight = [&](size_t kk, size_t j) { return kk < k_ ? C(kk, j) - zprime(row_of(kk), j) : 0; };
    auto code = [&](size_t kk, size_t j) { return kk < k_ ? C(kk, j) : zprime(row_of(kk), j); };
    // Scale row of kernel block b: the weight block, or the only row.
    auto srow = [&](size_t b) { return bs_ ? b : 0; };

    size_t bad = 0;
    double worst = 0.0;
    std::vector<int8_t> q(kp);
    for (size_t i = 0; i < m_; ++i) {
      const float* xi = x.data() + i * lda;
      std::vector<float> xpad(kp, 0.0f);
      std::copy(xi, xi + k_, xpad.begin());
      QD8Params qd{0, 0.0f};
      std::vector<float> sxb(blocks, 0.0f);
      if (act_ == Q4Act::kInt8Row) {
        qd = quantize_qd8(xi, k_, q.data());
        std::fill(q.begin() + k_, q.end(), int8_t(qd.zero_point));
      } else if (act_ == Q4Act::kInt8Block) {
        std::fill(q.begin(), q.end(), 0);
        for (size_t b = 0; b * kb < k_; ++b) sxb[b] = quantize_symmetric(xi + b * kb, std::min(kb, k_ - b * kb), q.data() + b * kb);
      }
      for (size_t j = 0; j < n_; ++j) {
        float acc = 0.0f;
        double g = 0.0;
        for (size_t b = 0; b < blocks; ++b) {
          const size_t k0 = b * kb, k1 = std::min(kp, k0 + kb);
          const float sb = scale_of(srow(b), j);
          if (act_ == Q4Act::kFloat) {
            float lo = 0.0f, hi = 0.0f, bsum = 0.0f;
            for (size_t kk = k0; kk < k1; ++kk) {
              (kk % 8 < 4 ? lo : hi) = std::fma(xpad[kk], float(code(kk, j) - 8), kk % 8 < 4 ? lo : hi);
              bsum += xpad[kk];
            }
            float t = lo + hi;
            if (any_zero) t = std::fma(-float(zprime(srow(b), j) - 8), bsum, t);
            acc = std::fma(t, sb, acc);
          } else {
            int32_t raw = 0, wsum = 0;
            for (size_t kk = k0; kk < k1; ++kk) {
              raw += (int32_t(q[kk]) + 128) * weight(kk, j);
              wsum += weight(kk, j);
            }
            if (act_ == Q4Act::kInt8Row) acc = std::fma(float(raw), sb, acc);
            else acc = std::fma(float(raw - 128 * wsum), sb * sxb[b], acc);
            g += double(sb) * double(wsum);
          }
        }
        const float bj = bias_ ? bias[j] : 0.0f;
        const float want = act_ == Q4Act::kInt8Row
                               ? std::fma(std::fma(-float(qd.zero_point + 128), float(g), acc), qd.scale, bj)
                               : acc + bj;
        const float got = y[i * ldy + j];
        if (!(got == want) && bad++ < 5)
          FAIL_CHECK("y[" << i << "][" << j << "] = " << got << ", reference " << want);

        // Against float64 X·dequant(W) + bias.
        // mag bounds the terms the float steps actually add: x·(c − 8) and
        // (z' − 8)·x in float mode, and the QD8 offset (|min x| at most
        // max|x|) the int8-row zero-point correction removes.
        double exact = bj, mag = 0.0, wabs = 0.0, xmax = 0.0;
        for (size_t kk = 0; kk < k_; ++kk) xmax = std::max(xmax, std::fabs(double(xi[kk])));
        for (size_t kk = 0; kk < k_; ++kk) {
          const double sk = scale_of(row_of(kk), j), wv = double(weight(kk, j)) * sk;
          exact += double(xi[kk]) * wv;
          mag += (std::fabs(double(xi[kk])) + xmax) * (std::abs(code(kk, j) - 8) + std::abs(zprime(row_of(kk), j) - 8)) *
                 std::fabs(sk);
          wabs += std::fabs(wv);
        }
        double step = 0.0;  // the largest activation quantization step of the row
        if (act_ == Q4Act::kInt8Row) step = qd.scale;
        for (float v : sxb) step = std::max(step, double(v));
        const double tol = step / 2 * wabs * 1.001 + 4.0 * double(k_ + 4) * std::ldexp(1.0, -24) * (mag + std::fabs(bj));
        worst = std::max(worst, std::fabs(got - exact) / (tol + 1e-30));
        if (!(std::fabs(got - exact) <= tol) && bad++ < 5)
          FAIL_CHECK("y[" << i << "][" << j << "] = " << got << ", float64 " << exact << ", tolerance " << tol);
      }
      for (size_t j = n_; j < ldy && i + 1 < m_; ++j)
        if (y[i * ldy + j] != sentinel && bad++ < 5) FAIL_CHECK("y[" << i << "][" << j << "] past N was written");
    }
    CHECK(bad == 0);
  }

 private:
  size_t m_ = 1, n_ = 1, k_ = 1, lda_ = 0, ldy_ = 0, bs_ = 32, int8_block_ = 32;
  bool signed_ = true, zp_ = false, f16_ = false, bias_ = false;
  Q4Act act_ = Q4Act::kInt8Row;
  Q4MatMulNBitsWeight::ZeroPoints nbits_zp_ = Q4MatMulNBitsWeight::ZeroPoints::kPacked;
  const Q4GemmConfig* config_ = nullptr;
  ThreadPool* pool_ = nullptr;
};

const Q4Act kActs[] = {Q4Act::kInt8Row, Q4Act::kInt8Block, Q4Act::kFloat};

}  // namespace

TEST_CASE("q4: QD8 rows map real 0 to the zero point and stay within half a step", "[q4]") {
  std::mt19937 rng(3);
  for (float lo : {-3.0f, 0.5f, -0.001f})
    for (float hi : {-0.25f, 2.0f, 40.0f}) {
      std::uniform_real_distribution<float> d(std::min(lo, hi), std::max(lo, hi));
      std::vector<float> x(300);
      for (float& v : x) v = d(rng);
      x[17] = 0.0f;
      std::vector<int8_t> q(x.size());
      const QD8Params p = quantize_qd8(x.data(), x.size(), q.data());
      CHECK(q[17] == p.zero_point);
      for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs((q[i] - p.zero_point) * p.scale - x[i]) <= p.scale * 0.5001f);
    }
  std::vector<float> zeros(40, 0.0f);
  std::vector<int8_t> q(40, 9);
  const QD8Params p = quantize_qd8(zeros.data(), zeros.size(), q.data());
  CHECK(p.scale == 0.0f);
  CHECK(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));
  CHECK(quantize_symmetric(zeros.data(), zeros.size(), q.data()) == 0.0f);
}

namespace {

// "q4 tile edges and precisions"
void isa_case_1(Isa isa) {
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
    for (Q4Act act : kActs) {
      const size_t mr = cfg->mr[int(act)];
      for (size_t m : {size_t{1}, size_t{2}, mr - 1, mr, mr + 1, size_t{33}})
        for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{35}, cfg->gemv_nc[int(act)] + 5})
          for (size_t k : {1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000})
            Q4Tester().m(m).n(n).k(k).act(act).zero_points(k % 2 == 1).config(*cfg).test();
    }
}

// "q4 int4 and uint4, per block and per channel, zero points, float16 scales"
void isa_case_2(Isa isa) {
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
    for (Q4Act act : kActs)
      for (bool sgn : {true, false})
        for (size_t bs : {0, 16, 32, 64, 128})
          for (bool zp : {false, true})
            for (size_t m : {size_t{1}, size_t{10}, cfg->mr[int(act)] + 1})
              Q4Tester().m(m).n(40).k(200).is_signed(sgn).block_size(bs).zero_points(zp).f16_scales(bs == 64)
                  .bias(zp).act(act).config(*cfg).test();
}

// "q4 MatMulNBits zero points packed, float and float16 match the [K,N] layout"
void isa_case_3(Isa isa) {
  using Z = Q4MatMulNBitsWeight::ZeroPoints;
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
    for (Z zt : {Z::kPacked, Z::kF32, Z::kF16})
      for (size_t k : {size_t{96}, size_t{100}})  // odd and even block counts per column
        Q4Tester().m(3).n(21).k(k).is_signed(false).zero_points(true).nbits_zero_points(zt).config(*cfg).test();
}

// "q4 per-channel int8-block uses its own activation block"
void isa_case_4(Isa isa) {
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
    for (size_t blk : {8, 24, 64})
      for (size_t m : {size_t{5}, cfg->mr[int(Q4Act::kInt8Block)] + 3})
        Q4Tester().m(m).n(20).k(150).block_size(0).zero_points(true).act(Q4Act::kInt8Block).int8_block(blk)
            .config(*cfg).test();
}

// "q4 strided activations and outputs, one and two threads"
void isa_case_5(Isa isa) {
  ThreadPool two(2);
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
    for (Q4Act act : kActs)
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
        Q4Tester().m(1).n(700).k(1024).act(act).bias(true).config(*cfg).pool(pool).test();
        Q4Tester().m(40).n(130).k(300).lda(333).ldy(150).zero_points(true).act(act).config(*cfg).pool(pool).test();
      }
}

// "q4 pack ukernel equals its scalar twin"
void isa_case_6(Isa isa) {
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t groups : {1, 2, 511, 512, 513, 1100})  // across the 16-bit column counts' widening
    for (size_t row_bytes : {size_t{8}, size_t{24}})
      for (uint8_t flip : {uint8_t{0}, uint8_t{8}}) {
        INFO(cfg->pack_name << " groups=" << groups << " row_bytes=" << row_bytes << " flip=" << int(flip));
        std::vector<uint8_t> src(groups * kQ4GroupK * row_bytes);
        for (uint8_t& v : src) v = static_cast<uint8_t>(byte(rng));
        std::vector<Q4Group> want(groups), got(groups);
        int32_t want_sums[kQ4NR], got_sums[kQ4NR];
        for (size_t j = 0; j < kQ4NR; ++j) want_sums[j] = got_sums[j] = int32_t(j) - 5;  // sums are added to
        q4_pack_ukernel_8x16__scalar(src.data(), row_bytes, groups, flip, want.data(), want_sums);
        cfg->pack(src.data(), row_bytes, groups, flip, got.data(), got_sums);
        CHECK(std::memcmp(want.data(), got.data(), groups * sizeof(Q4Group)) == 0);
        CHECK(std::equal(want_sums, want_sums + kQ4NR, got_sums));
      }
  // Through Q4Gemm: per-channel weights whose one block spans 600 groups.
  for (bool sgn : {true, false})
    Q4Tester().m(2).n(32).k(4800).is_signed(sgn).block_size(0).zero_points(!sgn).config(*cfg).test();
}

}  // namespace

// One case per distinct Q4GemmConfig family.
#define Q4_ISA_CASES(name, tags, body) \
  ONEBIT_ISA_CASE(name, tags, Scalar, body) \
  ONEBIT_ISA_CASE(name, tags, Avx2, body) \
  ONEBIT_ISA_CASE(name, tags, Avx512, body) \
  ONEBIT_ISA_CASE(name, tags, Avx512Vnni, body) \
  ONEBIT_ISA_CASE(name, tags, Amx, body)

Q4_ISA_CASES("q4 tile edges and precisions", "[q4]", isa_case_1)

Q4_ISA_CASES("q4 int4 and uint4, per block and per channel, zero points, float16 scales", "[q4]", isa_case_2)

Q4_ISA_CASES("q4 MatMulNBits zero points packed, float and float16 match the [K,N] layout", "[q4]", isa_case_3)

Q4_ISA_CASES("q4 per-channel int8-block uses its own activation block", "[q4]", isa_case_4)

Q4_ISA_CASES("q4 strided activations and outputs, one and two threads", "[q4]", isa_case_5)

Q4_ISA_CASES("q4 pack ukernel equals its scalar twin", "[q4]", isa_case_6)

namespace {

// The row quantizers as first written: one running extreme, element by
// element. quant/act_quant.cpp splits the extremes over lanes; the scales
// and codes must be these.
float clamp_ref(float v, float lo, float hi) { return v >= lo ? (v > hi ? hi : v) : lo; }

QD8Params qd8_sequential(const float* x, size_t n, int8_t* q) {
  float lo = 0.0f, hi = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  const float scale = (hi - lo) / 255.0f;
  if (!(scale >= FLT_MIN)) {
    for (size_t i = 0; i < n; ++i) q[i] = 0;
    return {0, 0.0f};
  }
  const float zp = clamp_ref(std::nearbyint(-128.0f - lo / scale), -128.0f, 127.0f);
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clamp_ref(std::nearbyint(x[i] / scale) + zp, -128.0f, 127.0f));
  return {static_cast<int32_t>(zp), scale};
}

float symmetric_sequential(const float* x, size_t n, int8_t* q) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
  const float scale = amax / 127.0f;
  if (!(scale >= FLT_MIN)) {
    for (size_t i = 0; i < n; ++i) q[i] = 0;
    return 0.0f;
  }
  for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(clamp_ref(std::nearbyint(x[i] / scale), -127.0f, 127.0f));
  return scale;
}

}  // namespace

TEST_CASE("act quant: the rows' extremes over lanes give the sequential loops' scales and codes", "[q4][act_quant]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 3.0f);
  size_t rows = 0;
  for (size_t n : {0, 1, 5, 15, 16, 17, 31, 32, 33, 100, 1024, 1031})
    for (int kind = 0; kind < 8; ++kind)
      for (int rep = 0; rep < 6; ++rep) {
        std::vector<float> x(n);
        for (float& v : x) v = d(rng);
        const size_t at = n ? rng() % n : 0, at2 = n ? rng() % n : 0;
        if (n) switch (kind) {
            case 0: break;
            case 1: x[at] = NAN; break;                                    // a NaN: never the extreme
            case 2: x[at] = INFINITY; x[at2] = -INFINITY; break;            // infinite scale
            case 3: for (float& v : x) v = (rng() & 1) ? 0.0f : -0.0f; break;  // zeros of both signs
            case 4: for (float& v : x) v = -std::fabs(v) - 1.0f; break;      // all negative
            case 5: for (float& v : x) v = std::fabs(v) + 1.0f; x[at] = -0.0f; break;  // all positive
            case 6: for (float& v : x) v = NAN; x[at] = 2.5f; break;        // one number among NaNs
            case 7: x[at] = -40.0f; x[at2] = 40.0f; break;                  // a tie of magnitudes
          }
        INFO("n " << n << " kind " << kind << " rep " << rep);
        std::vector<int8_t> got(n + 1, 9), want(n + 1, 9);
        const QD8Params p = quantize_qd8(x.data(), n, got.data()), pw = qd8_sequential(x.data(), n, want.data());
        CHECK(std::memcmp(&p.scale, &pw.scale, sizeof(float)) == 0);
        CHECK(p.zero_point == pw.zero_point);
        CHECK(got == want);
        const float s = quantize_symmetric(x.data(), n, got.data()), sw = symmetric_sequential(x.data(), n, want.data());
        CHECK(std::memcmp(&s, &sw, sizeof(float)) == 0);
        CHECK(got == want);
        for (size_t kb : {32, 16, 64, 7}) {  // by blocks: each block as its own sequential call
          INFO("block " << kb);
          const size_t blocks = (n + kb - 1) / kb;
          std::vector<float> sb(blocks + 1, -1.0f), sbw(blocks + 1, -1.0f);
          std::vector<int32_t> sum(blocks + 1, -1), sumw(blocks + 1, -1);
          quantize_symmetric_blocks(x.data(), n, kb, got.data(), sb.data(), sum.data());
          for (size_t b = 0; b < blocks; ++b) {
            const size_t k0 = b * kb, len = std::min(kb, n - k0);
            sbw[b] = symmetric_sequential(x.data() + k0, len, want.data() + k0);
            sumw[b] = 0;
            for (size_t k = k0; k < k0 + len; ++k) sumw[b] += want[k];
          }
          CHECK(std::memcmp(sb.data(), sbw.data(), sb.size() * sizeof(float)) == 0);
          CHECK(sum == sumw);
          CHECK(got == want);
        }
        ++rows;
      }
  CHECK(rows == 12 * 8 * 6);
}

TEST_CASE("q4: bad inputs are errors that name the value", "[q4]") {
  std::vector<uint8_t> data(64);
  std::vector<float> scales(16, 1.0f);
  Q4OnnxWeight w;
  w.k = 16;
  w.n = 8;
  w.data = data.data();
  w.scales = scales.data();
  w.block_size = 12;
  CHECK_THROWS_WITH(Q4Gemm(q4_gemm_config(), w), Catch::Contains("block_size = 12"));
  w.block_size = 16;
  scales[3] = std::nanf("");
  CHECK_THROWS_WITH(Q4Gemm(q4_gemm_config(), w), Catch::Contains("not finite"));
  const float half_zp[8] = {7.5f, 8, 8, 8, 8, 8, 8, 8};
  scales[3] = 1.0f;
  Q4MatMulNBitsWeight nw;
  nw.k = 16;
  nw.n = 8;
  nw.block_size = 16;
  nw.b = data.data();
  nw.scales = scales.data();
  nw.zero_point_type = Q4MatMulNBitsWeight::ZeroPoints::kF32;
  nw.zero_points = half_zp;
  CHECK_THROWS_WITH(Q4Gemm(q4_gemm_config(), nw), Catch::Contains("zero_points[0] = 7.5"));
  Q4GemmOptions opt;
  opt.int8_block = 12;
  nw.zero_point_type = Q4MatMulNBitsWeight::ZeroPoints::kNone;
  CHECK_THROWS_WITH(Q4Gemm(q4_gemm_config(), nw, opt), Catch::Contains("int8_block = 12"));
}

namespace {

// One member of a sibling group: its weights, drawn, and the Q4Gemm packed from them.
struct GroupMember {
  std::vector<uint8_t> data, zeros;
  std::vector<float> scales, bias;
  std::unique_ptr<Q4Gemm> gemm;
};

// half_exact: every scale rounded to a float16 value first (so a config
// with f16_scales keeps them as float16).
GroupMember group_member(size_t k, size_t n, size_t bs, bool is_signed, bool zero_points, bool bias, unsigned seed,
                         const Q4GemmConfig& config = q4_gemm_config(), bool half_exact = false) {
  GroupMember g;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_real_distribution<float> sd(0.01f, 0.1f), bd(-1.0f, 1.0f);
  const size_t rows = bs ? div_up(k, bs) : 1;
  g.data.assign(div_up(k * n, 2), 0);
  for (size_t i = 0; i < k * n; ++i) put_nibble(g.data, i, code(rng));
  for (size_t i = 0; i < rows * n; ++i) g.scales.push_back(sd(rng));
  if (half_exact)
    for (float& s : g.scales) s = half_to_float(float_to_half(s));
  if (zero_points) {
    g.zeros.assign(div_up(rows * n, 2), 0);
    for (size_t i = 0; i < rows * n; ++i) put_nibble(g.zeros, i, code(rng));
  }
  for (size_t j = 0; bias && j < n; ++j) g.bias.push_back(bd(rng));
  Q4OnnxWeight w;
  w.k = k;
  w.n = n;
  w.is_signed = is_signed;
  w.data = g.data.data();
  w.block_size = bs;
  w.scales = g.scales.data();
  w.zero_points = zero_points ? g.zeros.data() : nullptr;
  Q4GemmOptions opt;
  opt.bias = bias ? g.bias.data() : nullptr;
  g.gemm = std::make_unique<Q4Gemm>(config, w, opt);
  return g;
}

}  // namespace

TEST_CASE("q4: a sibling group writes each output as its own call, bit for bit", "[q4][siblings]") {
  // K past a whole number of blocks (padding); N on, past and well past
  // the decode call's columns; zero points on one member only (the float
  // mode's block sums), a bias on another; output strides past N.
  for (size_t bs : {size_t{32}, size_t{0}}) {
    const size_t k = 200;
    GroupMember a = group_member(k, 40, bs, true, false, false, 1);
    GroupMember b = group_member(k, 16, bs, false, true, false, 2);
    GroupMember c = group_member(k, 330, bs, true, false, true, 3);
    const Q4Gemm* gemms[3] = {a.gemm.get(), b.gemm.get(), c.gemm.get()};
    const size_t ldy[3] = {40, 21, 333};
    ThreadPool two(2);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two})
      for (Q4Act act : {Q4Act::kInt8Row, Q4Act::kInt8Block, Q4Act::kFloat})
        for (size_t m : {size_t{1}, size_t{3}, size_t{9}, size_t{70}}) {
          INFO("bs " << bs << " act " << act_name(act) << " m " << m << " threads " << (pool ? 2 : 1));
          std::mt19937 rng(static_cast<unsigned>(m + 17));
          std::uniform_real_distribution<float> xd(-1.0f, 1.0f);
          std::vector<float> x(m * k);
          for (float& v : x) v = xd(rng);
          std::vector<std::vector<float>> want(3), got(3);
          float* y[3];
          for (size_t j = 0; j < 3; ++j) {
            want[j].assign(m * ldy[j], -7.0f);
            got[j].assign(m * ldy[j], -7.0f);
            y[j] = got[j].data();
            std::vector<uint8_t> ws(gemms[j]->workspace_bytes(m, act) + 64);
            gemms[j]->run(m, act, x.data(), k, want[j].data(), ldy[j], ws.data(), pool);
          }
          std::vector<uint8_t> ws(Q4Gemm::group_workspace_bytes(gemms, 3, m, act) + 64);
          Q4Gemm::run_group(gemms, 3, m, act, x.data(), k, y, ldy, ws.data(), pool);
          for (size_t j = 0; j < 3; ++j) {
            INFO("member " << j);
            CHECK(std::memcmp(want[j].data(), got[j].data(), want[j].size() * sizeof(float)) == 0);
          }
        }
  }
}

TEST_CASE("q4: a group of weights with different K or blocks is refused, naming them", "[q4][siblings]") {
  GroupMember a = group_member(64, 16, 32, true, false, false, 1);
  GroupMember b = group_member(96, 16, 32, true, false, false, 2);
  GroupMember c = group_member(64, 16, 16, true, false, false, 3);
  CHECK(!Q4Gemm::group_compatible(*a.gemm, *b.gemm));
  CHECK(!Q4Gemm::group_compatible(*a.gemm, *c.gemm));
  const Q4Gemm* gemms[2] = {a.gemm.get(), c.gemm.get()};
  std::vector<float> x(64), y0(16), y1(16);
  float* y[2] = {y0.data(), y1.data()};
  const size_t ldy[2] = {16, 16};
  std::vector<uint8_t> ws(Q4Gemm::group_workspace_bytes(gemms, 2, 1, Q4Act::kInt8Block));
  CHECK_THROWS_WITH(Q4Gemm::run_group(gemms, 2, 1, Q4Act::kInt8Block, x.data(), 64, y, ldy, ws.data(), nullptr),
                    Catch::Contains("weight 1 of a group"));
}

TEST_CASE("q4: a decode row on several streams a thread equals the one-stream gemv, bit for bit", "[q4][streams]") {
  // Members of one group on the family's streams kernel against the same
  // weights on its gemv (the config without gemv_streams): shares and
  // sub-ranges that end inside a member and past it, zero points on some
  // members only, per-block and per-channel scales, one and two threads.
  // Every variant of a family (the VNNI family's three decode prefetches,
  // of which a CPU runs the one for its vendor and generation).
  int checked = 0, variants = 0;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni})
  for (const Q4GemmConfig* cfg : q4_gemm_config_variants(isa)) {  // empty where this CPU lacks it
    ++variants;
    Q4GemmConfig plain = *cfg;
    for (auto& f : plain.gemv_streams) f = nullptr;
    ThreadPool two(2);
    for (size_t bs : {size_t{32}, size_t{0}, size_t{64}})
      for (size_t k : {size_t{200}, size_t{1024}}) {
        const size_t ns[3] = {k == 1024 ? size_t{3000} : size_t{40}, 17, 330};
        std::vector<GroupMember> fast, slow;
        for (size_t j = 0; j < 3; ++j) {
          fast.push_back(group_member(k, ns[j], bs, j != 1, j == 1, j == 2, unsigned(j + 5), *cfg));
          slow.push_back(group_member(k, ns[j], bs, j != 1, j == 1, j == 2, unsigned(j + 5), plain));
        }
        for (Q4Act act : {Q4Act::kInt8Row, Q4Act::kInt8Block, Q4Act::kFloat}) {
          if (!cfg->gemv_streams[int(act)]) continue;
          REQUIRE(cfg->streams >= 1);
          REQUIRE(cfg->streams <= kQ4Streams);
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two})
            for (size_t count : {size_t{1}, size_t{3}}) {
              INFO(cfg->gemv_streams_name[int(act)] << " bs " << bs << " k " << k << " act " << act_name(act)
                                                    << " members " << count << " threads " << (pool ? 2 : 1));
              std::mt19937 rng(static_cast<unsigned>(k + bs));
              std::uniform_real_distribution<float> xd(-1.0f, 1.0f);
              std::vector<float> x(k);
              for (float& v : x) v = xd(rng);
              const Q4Gemm* gf[3] = {fast[0].gemm.get(), fast[1].gemm.get(), fast[2].gemm.get()};
              const Q4Gemm* gs[3] = {slow[0].gemm.get(), slow[1].gemm.get(), slow[2].gemm.get()};
              std::vector<std::vector<float>> want(3), got(3);
              float *yw[3], *yg[3];
              for (size_t j = 0; j < 3; ++j) {
                want[j].assign(ns[j], -7.0f);
                got[j].assign(ns[j], -7.0f);
                yw[j] = want[j].data();
                yg[j] = got[j].data();
              }
              std::vector<uint8_t> ws(Q4Gemm::group_workspace_bytes(gf, count, 1, act) + 64);
              Q4Gemm::run_group(gs, count, 1, act, x.data(), k, yw, ns, ws.data(), pool);
              Q4Gemm::run_group(gf, count, 1, act, x.data(), k, yg, ns, ws.data(), pool);
              for (size_t j = 0; j < count; ++j) {
                INFO("member " << j);
                CHECK(std::memcmp(want[j].data(), got[j].data(), want[j].size() * sizeof(float)) == 0);
              }
              ++checked;
            }
        }
      }
  }
  if (cpu_supports(Isa::Avx512Vnni)) {
    CHECK(checked > 0);
    CHECK(variants == 6);
  }
}

TEST_CASE("q4: the VNNI decode prefetch follows the CPU generation", "[q4][streams]") {
  // CPUID leaf 1 EAX of real parts: the extended family counts only when
  // the base family is 0xF.
  CHECK(x86_family(0x00A10F11) == 0x19);  // AMD EPYC 9004 (Zen 4)
  CHECK(x86_family(0x00B00F21) == 0x1A);  // AMD Zen 5
  CHECK(x86_family(0x00A20F12) == 0x19);  // AMD Ryzen 5000 (Zen 3)
  CHECK(x86_family(0x000806F8) == 6);     // Intel Sapphire Rapids
  CHECK(x86_family(0x00F006A0) == 6);     // extended bits set, base 6: ignored
  // The chosen config: the L1 prefetch on Zen 5 and later, the near L2 one
  // on earlier AMD (Zen 4: the first with AVX-512), the far L2 one elsewhere.
  if (const Q4GemmConfig* cfg = q4_gemm_config_for(Isa::Avx512Vnni)) {
    const CpuFeatures& f = cpu_features();
    const std::string name = cfg->gemv_streams_name[int(Q4Act::kInt8Block)];
    INFO("amd " << f.amd() << " family " << f.family << " " << name);
    const std::string want = std::string("q4_gemv_streams_ukernel_1x16s4__avx512vnni") +
                             (!f.amd() ? "" : f.family >= 0x1A ? "_l1pf" : "_l2near");
    CHECK(name == want);
  }
}

TEST_CASE("q4: float16 scales where every scale is one, bit for bit the float32 scales", "[q4][f16-scales]") {
  // A family with f16_scales keeps a weight's scales as float16 when each
  // is exactly a normal float16 (or zero): half the scale bytes, the same
  // values, so every output equals that of the same family reading them as
  // float32 (its config copy without f16_scales), on every path: the prompt
  // tile (m 5, 9; 17 reaches the AMX tiles), the one-row gemv and the
  // streams kernel (m 1), every activation precision, zero points or not,
  // blocked or per channel.
  int checked = 0;
  ThreadPool two(2);
  for (Isa isa : kIsas)
    for (const Q4GemmConfig* cfg : q4_gemm_config_variants(isa)) {
      if (!cfg->f16_scales) continue;
      Q4GemmConfig f32 = *cfg;
      f32.f16_scales = false;
      for (size_t bs : {size_t{32}, size_t{0}, size_t{64}})
        for (size_t k : {size_t{200}, size_t{1024}})
          for (bool zp : {false, true}) {
            const size_t n = k == 1024 ? 3000 : 40;
            const GroupMember half = group_member(k, n, bs, !zp, zp, true, unsigned(k + bs), *cfg, true);
            const GroupMember full = group_member(k, n, bs, !zp, zp, true, unsigned(k + bs), f32, true);
            REQUIRE(half.gemm->scales_f16());
            REQUIRE(!full.gemm->scales_f16());
            const size_t rows = bs ? div_up(qgemm_detail::round_up(k, size_t{32}), bs) : 1;
            CHECK(full.gemm->weight_bytes() - half.gemm->weight_bytes() == div_up(n, size_t{16}) * 16 * rows * 2);
            for (Q4Act act : {Q4Act::kInt8Row, Q4Act::kInt8Block, Q4Act::kFloat})
              for (size_t m : {size_t{1}, size_t{5}, size_t{9}, size_t{17}})
                for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
                  INFO(cfg->gemv_streams_name[int(Q4Act::kInt8Block)] << " bs " << bs << " k " << k << " zp " << zp
                                                                      << " act " << act_name(act) << " m " << m);
                  std::mt19937 rng(static_cast<unsigned>(m * 7 + k));
                  std::uniform_real_distribution<float> xd(-1.0f, 1.0f);
                  std::vector<float> x(m * k);
                  for (float& v : x) v = xd(rng);
                  std::vector<float> want(m * n, -7.0f), got(m * n, -7.0f);
                  std::vector<uint8_t> ws(std::max(half.gemm->workspace_bytes(m, act), full.gemm->workspace_bytes(m, act)));
                  full.gemm->run(m, act, x.data(), k, want.data(), n, ws.data(), pool);
                  half.gemm->run(m, act, x.data(), k, got.data(), n, ws.data(), pool);
                  CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
                  ++checked;
                }
          }
      // Scales that are not all float16 values stay float32: one rounding
      // away, a subnormal float16 and one past float16's range.
      CHECK(!group_member(64, 40, 32, true, false, false, 3, *cfg, false).gemm->scales_f16());
      for (float odd : {0x1p-20f, 70000.0f}) {
        GroupMember g = group_member(64, 40, 32, true, false, false, 3, *cfg, true);
        std::vector<float> scales = g.scales;
        scales[17] = odd;
        Q4OnnxWeight w;
        w.k = 64;
        w.n = 40;
        w.is_signed = true;
        w.data = g.data.data();
        w.block_size = 32;
        w.scales = scales.data();
        CHECK(!Q4Gemm(*cfg, w).scales_f16());
      }
    }
  if (cpu_supports(Isa::Avx512Vnni)) CHECK(checked > 0);
}

TEST_CASE("decode streams: every panel once, sub-ranges side by side and in order", "[streams]") {
  // quant/gemm_parallel.h run_streams, which the Q4, Q8 and float16 decode
  // paths share: with and without a pool, panel counts below, at and far
  // past the shares, one to the most streams. A step's panels are one of
  // each live sub-range, equally far apart; a thread's steps move forward.
  ThreadPool two(2);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two})
    for (bool worth : {false, true})
      for (size_t panels : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{17}, size_t{1000}})
        for (size_t streams : {size_t{1}, size_t{2}, size_t{3}, qgemm_detail::kMaxDecodeStreams}) {
          INFO("threads " << (pool ? 2 : 1) << " worth " << worth << " panels " << panels << " streams " << streams);
          std::mutex mu;
          std::map<std::thread::id, std::vector<std::vector<size_t>>> steps;  // per thread, in call order
          qgemm_detail::run_streams(pool, panels, streams, worth, [&](const size_t* panel, size_t live) {
            std::lock_guard<std::mutex> lock(mu);
            steps[std::this_thread::get_id()].emplace_back(panel, panel + live);
          });
          std::vector<int> seen(panels, 0);
          bool bad = false;
          for (const auto& [thread, list] : steps)
            for (size_t i = 0; i < list.size(); ++i) {
              const std::vector<size_t>& st = list[i];
              if (st.empty() || st.size() > streams) bad = true;
              for (size_t x = 0; x < st.size(); ++x) {
                if (st[x] >= panels) { bad = true; continue; }
                ++seen[st[x]];
                if (x >= 2 && st[x] - st[x - 1] != st[1] - st[0]) bad = true;  // sub-ranges equally long
                if (x >= 1 && st[x] <= st[x - 1]) bad = true;
              }
              if (i > 0 && !st.empty() && !list[i - 1].empty() && st[0] <= list[i - 1][0]) bad = true;
            }
          CHECK_FALSE(bad);
          for (size_t p = 0; p < panels; ++p) CHECK(seen[p] == 1);
        }
}
