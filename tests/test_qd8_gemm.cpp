// Dynamic int8 for float MatMuls (quant/qd8_gemm.h).
//
// The reference quantizes with the same public row quantizer (per column of
// W, per row of X), accumulates in int64 and rounds RN32(acc·a_s·w_s)
// exactly in 128-bit integers: every kernel family must match it bit for
// bit. Against float64 X·W the error must stay within the quantization
// steps: |err| ≤ (a_s/2)·Σ|w| + (w_s/2)·Σ|x| + (a_s/2)(w_s/2)·K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "quant/act_quant.h"
#include "quant/qd8_gemm.h"
#include "quant_test_util.h"
#include "tests/isa_test_util.h"

using namespace onebit;
using namespace onebit::quant_test;

namespace {

class DynamicTester {
 public:
  DynamicTester& m(size_t v) { m_ = v; return *this; }
  DynamicTester& n(size_t v) { n_ = v; return *this; }
  DynamicTester& k(size_t v) { k_ = v; return *this; }
  DynamicTester& lda(size_t v) { lda_ = v; return *this; }
  DynamicTester& ldw(size_t v) { ldw_ = v; return *this; }
  DynamicTester& zero_lines(bool v) { zero_lines_ = v; return *this; }
  DynamicTester& config(const Q8GemmConfig& v) { config_ = &v; return *this; }
  DynamicTester& pool(ThreadPool* v) { pool_ = v; return *this; }

  void test() const {
    REQUIRE(config_);
    INFO(config_->gemm_name << " m=" << m_ << " n=" << n_ << " k=" << k_ << " lda=" << lda_ << " ldw=" << ldw_
                            << " zero_lines=" << zero_lines_ << " threads=" << (pool_ ? pool_->size() : 1));
    const size_t lda = std::max(lda_, k_), ldw = std::max(ldw_, n_);
    std::mt19937 rng(static_cast<unsigned>(m_ * 31 + n_ * 17 + k_));
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(m_ * lda), w(k_ * ldw);
    for (float& v : x) v = d(rng);
    for (float& v : w) v = d(rng) * 0.05f;
    if (zero_lines_) {  // an all-zero activation row and weight column
      std::fill(x.begin(), x.begin() + k_, 0.0f);
      for (size_t kk = 0; kk < k_; ++kk) w[kk * ldw + n_ / 2] = 0.0f;
    }
    const Qd8Gemm gemm(*config_, k_, n_, w.data(), ldw, pool_);
    auto ws = workspace(gemm.workspace_bytes(m_));
    std::vector<float> y(m_ * n_, -1.0f);
    gemm.run(m_, x.data(), lda, y.data(), n_, ws.get(), pool_);

    // Reference quantization.
    std::vector<int8_t> qw(k_ * n_), qx(m_ * k_), col(k_);
    std::vector<float> sw(n_), sx(m_), column(k_);
    for (size_t j = 0; j < n_; ++j) {
      for (size_t kk = 0; kk < k_; ++kk) column[kk] = w[kk * ldw + j];
      sw[j] = quantize_symmetric(column.data(), k_, col.data());
      for (size_t kk = 0; kk < k_; ++kk) qw[kk * n_ + j] = col[kk];
      float amax = 0.0f;
      for (float v : column) amax = std::max(amax, std::fabs(v));
      CHECK(sw[j] == amax / 127.0f);
      CHECK(gemm.weight_scales()[j] == sw[j]);
    }
    for (size_t i = 0; i < m_; ++i) sx[i] = quantize_symmetric(x.data() + i * lda, k_, qx.data() + i * k_);

    size_t bad = 0;
    for (size_t i = 0; i < m_; ++i)
      for (size_t j = 0; j < n_; ++j) {
        int64_t acc = 0;
        double exact = 0.0, xabs = 0.0, wabs = 0.0;
        for (size_t kk = 0; kk < k_; ++kk) {
          acc += int64_t(qx[i * k_ + kk]) * qw[kk * n_ + j];
          exact += double(x[i * lda + kk]) * double(w[kk * ldw + j]);
          xabs += std::fabs(x[i * lda + kk]);
          wabs += std::fabs(w[kk * ldw + j]);
        }
        const float want = sx[i] > 0 && sw[j] > 0 ? ref_f32(acc, sx[i], sw[j]) : 0.0f;
        const float got = y[i * n_ + j];
        if (!(got == want) && bad++ < 5) FAIL_CHECK("y[" << i << "][" << j << "] = " << got << ", expected " << want);
        const double tol = sx[i] / 2 * wabs + sw[j] / 2 * xabs + double(sx[i]) * sw[j] / 4 * double(k_) + 1e-6;
        if (!(std::fabs(got - exact) <= tol) && bad++ < 5)
          FAIL_CHECK("y[" << i << "][" << j << "] = " << got << ", float64 " << exact << ", tolerance " << tol);
      }
    CHECK(bad == 0);
    CHECK(gemm.gemm().colsum_computations() == 0);  // symmetric: no column sums
  }

 private:
  size_t m_ = 1, n_ = 1, k_ = 1, lda_ = 0, ldw_ = 0;
  bool zero_lines_ = false;
  const Q8GemmConfig* config_ = nullptr;
  ThreadPool* pool_ = nullptr;
};

}  // namespace

namespace {

// "qd8: tile edges"
void isa_case_1(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (size_t m : {size_t{1}, size_t{2}, cfg->mr - 1, cfg->mr, cfg->mr + 1, size_t{33}})
      for (size_t n : {size_t{1}, cfg->nr - 1, cfg->nr + 1, cfg->gemv_nc + 5})
        for (size_t k : {1, 3, 31, 32, 33, 64, 129, 1000}) DynamicTester().m(m).n(n).k(k).config(*cfg).test();
}

// "qd8: zero rows and columns give exact zeros, no NaN"
void isa_case_2(Isa isa) {
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (size_t m : {size_t{1}, size_t{5}}) DynamicTester().m(m).n(20).k(50).zero_lines(true).config(*cfg).test();
}

// "qd8: strided inputs, one and two threads"
void isa_case_3(Isa isa) {
  ThreadPool two(2);
  const Q8GemmConfig* cfg = q8_gemm_config_for(isa);
  REQUIRE(cfg);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
      DynamicTester().m(1).n(1000).k(1024).config(*cfg).pool(pool).test();
      DynamicTester().m(50).n(200).k(300).lda(310).ldw(230).config(*cfg).pool(pool).test();
    }
}

}  // namespace

// One case per distinct Q8GemmConfig family.
#define QD8_ISA_CASES(name, tags, body) \
  ONEBIT_ISA_CASE(name, tags, Scalar, body) \
  ONEBIT_ISA_CASE(name, tags, Avx2, body) \
  ONEBIT_ISA_CASE(name, tags, Avx512Vnni, body)

QD8_ISA_CASES("qd8: tile edges", "[qd8]", isa_case_1)

QD8_ISA_CASES("qd8: zero rows and columns give exact zeros, no NaN", "[qd8]", isa_case_2)

QD8_ISA_CASES("qd8: strided inputs, one and two threads", "[qd8]", isa_case_3)

TEST_CASE("qd8: quantize_weight gives each column quantize_symmetric's codes and scale", "[qd8]") {
  // Rows read in order now: the same codes and scales as quantizing each
  // gathered column, with NaN, ±inf, a zero column, a denormal-only column
  // and a row stride past N.
  const size_t k = 37, n = 11, ldw = 13;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> w(k * ldw);
  for (float& v : w) v = d(rng);
  for (size_t i = 0; i < k; ++i) {
    w[i * ldw + 2] = 0.0f;      // zero column
    w[i * ldw + 3] = 1e-39f;    // scale below FLT_MIN: zero codes
  }
  w[5 * ldw + 4] = NAN;                                       // ignored by the max, code -127
  w[0 * ldw + 4] = NAN;                                       // first in its column
  w[7 * ldw + 6] = INFINITY;                                  // scale inf: finite values 0, inf -127
  w[9 * ldw + 7] = -INFINITY;
  w[3 * ldw + 8] = 1e30f;                                     // large finite
  std::vector<float> scales;
  const std::vector<int8_t> q = Qd8Gemm::quantize_weight(k, n, w.data(), ldw, scales);
  REQUIRE(q.size() == k * n);
  REQUIRE(scales.size() == n);
  for (size_t j = 0; j < n; ++j) {
    std::vector<float> col(k);
    std::vector<int8_t> want(k);
    for (size_t i = 0; i < k; ++i) col[i] = w[i * ldw + j];
    const float s = quantize_symmetric(col.data(), k, want.data());
    INFO("column " << j);
    CHECK(std::memcmp(&s, &scales[j], sizeof(float)) == 0);
    for (size_t i = 0; i < k; ++i) CHECK(int(q[i * n + j]) == int(want[i]));
  }
  CHECK(scales[2] == 0.0f);
  CHECK(scales[3] == 0.0f);
}
