// SgemmTester (after XNNPACK's GemmMicrokernelTester): one float GEMM
// problem on one microkernel family and thread count, against a double
// loop. The tolerance is the dot-product error bound γ_K·Σ|a·b| (Higham,
// "Accuracy and Stability of Numerical Algorithms", §3.1), so it scales
// with K; columns past N must stay untouched.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "ops/sgemm.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit::test {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Workspace = std::unique_ptr<void, AlignedFree>;

Workspace make_workspace(size_t bytes) {
  return Workspace(bytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr);
}

class SgemmTester {
 public:
  SgemmTester& m(size_t v) { m_ = v; return *this; }
  SgemmTester& n(size_t v) { n_ = v; return *this; }
  SgemmTester& k(size_t v) { k_ = v; return *this; }
  SgemmTester& lda(size_t v) { lda_ = v; return *this; }
  SgemmTester& ldb(size_t v) { ldb_ = v; return *this; }
  SgemmTester& ldc(size_t v) { ldc_ = v; return *this; }
  SgemmTester& bias(bool v) { bias_ = v; return *this; }
  SgemmTester& trans_a(bool v) { trans_a_ = v; return *this; }
  SgemmTester& trans_b(bool v) { trans_b_ = v; return *this; }
  SgemmTester& packed(bool v) { packed_ = v; return *this; }
  SgemmTester& config(const SgemmConfig& v) { config_ = &v; return *this; }
  SgemmTester& pool(ThreadPool* v) { pool_ = v; return *this; }

  void test() const {
    REQUIRE(config_);
    INFO("config " << config_->gemm_name << " m=" << m_ << " n=" << n_ << " k=" << k_ << " lda=" << lda_
                   << " ldb=" << ldb_ << " ldc=" << ldc_ << " bias=" << bias_ << " trans_a=" << trans_a_
                   << " trans_b=" << trans_b_ << " packed=" << packed_
                   << " threads=" << (pool_ ? pool_->size() : 1));
    // A is M×K (K×M when transposed), B is K×N (N×K), C is M×N; each with
    // its leading dimension, which may exceed the row length.
    const size_t a_rows = trans_a_ ? k_ : m_, a_cols = trans_a_ ? m_ : k_;
    const size_t b_rows = trans_b_ ? n_ : k_, b_cols = trans_b_ ? k_ : n_;
    const size_t lda = std::max(lda_, a_cols), ldb = std::max(ldb_, b_cols), ldc = std::max(ldc_, n_);
    std::mt19937 rng(static_cast<unsigned>(m_ * 7919 + n_ * 104729 + k_ * 13));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(a_rows * lda + 1), b(b_rows * ldb + 1), bias(n_);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    auto A = [&](size_t i, size_t kk) { return trans_a_ ? a[kk * lda + i] : a[i * lda + kk]; };
    auto B = [&](size_t kk, size_t j) { return trans_b_ ? b[j * ldb + kk] : b[kk * ldb + j]; };

    const float sentinel = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> c(m_ * ldc + 1, sentinel);
    const float* bias_p = bias_ ? bias.data() : nullptr;
    if (packed_) {
      PackedB pb(*config_, k_, n_, b.data(), ldb, trans_b_, pool_);
      REQUIRE(reinterpret_cast<uintptr_t>(pb.data()) % 64 == 0);
      Workspace ws = make_workspace(sgemm_packed_workspace(pb, m_, trans_a_));
      sgemm_packed(m_, a.data(), lda, trans_a_, pb, bias_p, c.data(), ldc, ws.get(), pool_);
    } else {
      Workspace ws = make_workspace(sgemm_workspace(*config_, m_, n_, k_, trans_a_, trans_b_));
      sgemm(*config_, m_, n_, k_, a.data(), lda, trans_a_, b.data(), ldb, trans_b_, bias_p, c.data(), ldc, ws.get(),
            pool_);
    }

    const double u = std::ldexp(1.0, -24);  // unit roundoff of float32
    size_t bad = 0;
    for (size_t i = 0; i < m_; ++i) {
      for (size_t j = 0; j < n_; ++j) {
        double ref = bias_ ? bias[j] : 0.0, mag = std::fabs(ref);
        for (size_t kk = 0; kk < k_; ++kk) {
          ref += double(A(i, kk)) * double(B(kk, j));
          mag += std::fabs(double(A(i, kk)) * double(B(kk, j)));
        }
        const double tol = 2.0 * double(k_ + 1) * u * mag + 1e-30;
        const double got = c[i * ldc + j];
        if (!(std::fabs(got - ref) <= tol) && bad++ < 5) {
          INFO("C[" << i << "][" << j << "] = " << got << ", expected " << ref << " (tolerance " << tol << ")");
          CHECK(std::fabs(got - ref) <= tol);
        }
      }
      for (size_t j = n_; j < ldc && i + 1 < m_; ++j)
        if (!std::isnan(c[i * ldc + j]) && bad++ < 5) FAIL_CHECK("C[" << i << "][" << j << "] past N was written");
    }
    CHECK(bad == 0);
  }

 private:
  size_t m_ = 1, n_ = 1, k_ = 1, lda_ = 0, ldb_ = 0, ldc_ = 0;
  bool bias_ = false, trans_a_ = false, trans_b_ = false, packed_ = true;
  const SgemmConfig* config_ = nullptr;
  ThreadPool* pool_ = nullptr;
};

}  // namespace onebit::test
