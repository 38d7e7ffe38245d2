// Float GEMM library and the MatMul / Gemm / MatMulInteger ops.
//
// SgemmTester (after XNNPACK's GemmMicrokernelTester) runs one problem on
// one ISA family and thread count against a double-precision loop; the
// tolerance is the dot-product error bound γ_K·Σ|a·b| (Higham, "Accuracy and
// Stability of Numerical Algorithms", §3.1), so it scales with K.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ops/f32_gemm_ukernels.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "ops/sgemm.h"
#include "ops/thread_pool.h"
#include "tests/op_test_util.h"

using namespace onebit;

namespace {

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

// Every family this machine runs, plus the one ONEBIT_ISA would pick.
std::vector<const SgemmConfig*> configs() {
  std::vector<const SgemmConfig*> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (const SgemmConfig* c = sgemm_config_for(isa)) out.push_back(c);
  return out;
}

const SgemmConfig& config_or_skip(Isa isa) {
  const SgemmConfig* c = sgemm_config_for(isa);
  if (!c) {
    WARN("this CPU cannot run " << isa_name(isa) << "; falling back to scalar");
    return *sgemm_config_for(Isa::Scalar);
  }
  return *c;
}

// The tile-edge sweep for one family: M, N and K below, at and above the
// tile and the K block, packed and in-place B, with and without bias.
void sweep_edges(const SgemmConfig& cfg, ThreadPool* pool) {
  const size_t mr = cfg.mr, nr = cfg.nr, kc = cfg.kc;
  for (size_t m : {size_t{1}, size_t{2}, mr - 1, mr, mr + 1, size_t{37}, size_t{200}})
    for (size_t n : {size_t{1}, nr - 1, nr, nr + 1, 2 * nr + 3, 5 * nr - 1})
      for (size_t k : {size_t{1}, size_t{3}, size_t{16}, kc - 1, kc, kc + 1, size_t{1000}}) {
        if (m * n * k > 8'000'000) continue;  // keeps the sweep to seconds; big shapes are covered below
        for (bool packed : {true, false})
          SgemmTester().config(cfg).pool(pool).m(m).n(n).k(k).bias((m + n + k) % 2 == 0).packed(packed).test();
      }
}

}  // namespace

TEST_CASE("sgemm: configs cover this CPU", "[sgemm]") {
  const SgemmConfig& best = sgemm_config();
  CHECK(best.isa <= cpu_features().level);
  for (const SgemmConfig* c : configs()) {
    CHECK(c->gemm);
    CHECK(c->gemv);
    CHECK(c->mr * c->nr > 0);
    CHECK(std::string(c->gemm_name).find(isa_name(c->isa)) != std::string::npos);
  }
  CHECK(sgemm_config_for(Isa::Scalar) != nullptr);
}

TEST_CASE("sgemm: scalar tile edges", "[sgemm]") { sweep_edges(*sgemm_config_for(Isa::Scalar), nullptr); }

TEST_CASE("sgemm: avx2 tile edges", "[sgemm]") { sweep_edges(config_or_skip(Isa::Avx2), nullptr); }

TEST_CASE("sgemm: avx512 tile edges", "[sgemm]") { sweep_edges(config_or_skip(Isa::Avx512), nullptr); }

TEST_CASE("sgemm: two threads", "[sgemm]") {
  ThreadPool pool(2);
  for (const SgemmConfig* cfg : configs()) {
    // Large enough to cross the parallel thresholds in every path.
    for (size_t m : {size_t{1}, size_t{3}, size_t{37}, size_t{300}})
      for (bool packed : {true, false}) {
        SgemmTester().config(*cfg).pool(&pool).m(m).n(517).k(cfg->kc + 7).bias(true).packed(packed).test();
        SgemmTester().config(*cfg).pool(&pool).m(m).n(65).k(1000).packed(packed).test();
      }
    SgemmTester().config(*cfg).pool(&pool).m(1).n(3000).k(700).bias(true).test();
  }
}

TEST_CASE("sgemm: strided and transposed operands", "[sgemm]") {
  ThreadPool pool(2);
  for (const SgemmConfig* cfg : configs())
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
      for (size_t m : {size_t{1}, cfg->mr + 1, size_t{37}})
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (bool packed : {true, false})
              SgemmTester()
                  .config(*cfg)
                  .pool(p)
                  .m(m)
                  .n(cfg->nr * 2 + 5)
                  .k(cfg->kc + 3)
                  .lda(cfg->kc + 40)
                  .ldb(cfg->kc + 77)
                  .ldc(cfg->nr * 3 + 1)
                  .trans_a(ta)
                  .trans_b(tb)
                  .bias(true)
                  .packed(packed)
                  .test();
}

TEST_CASE("sgemm: a few rows against a transposed B (the dot path)", "[sgemm]") {
  ThreadPool pool(2);
  for (const SgemmConfig* cfg : configs()) {
    CHECK(std::string(cfg->dot_name).find(isa_name(cfg->isa)) != std::string::npos);
    // Rows up to the dot kernel's limit and one past it (the packed path);
    // K below, at and above a vector and a KV head's width.
    for (size_t m : {size_t{1}, size_t{2}, size_t{3}, kF32DotMaxRows, kF32DotMaxRows + 1})
      for (size_t n : {size_t{1}, size_t{7}, size_t{33}, size_t{1000}})
        for (size_t k : {size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{128}, size_t{131}})
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
            SgemmTester().config(*cfg).pool(p).m(m).n(n).k(k).lda(k + 3).ldb(k + 5).trans_b(true).bias(n % 2 == 1)
                .packed(false).test();
    CHECK(sgemm_workspace(*cfg, kF32DotMaxRows, 100, 128, false, true) == 0);
  }
}

TEST_CASE("sgemm: empty dimensions", "[sgemm]") {
  for (const SgemmConfig* cfg : configs()) {
    SgemmTester().config(*cfg).m(3).n(5).k(0).bias(true).test();
    SgemmTester().config(*cfg).m(3).n(5).k(0).bias(false).packed(false).test();
    SgemmTester().config(*cfg).m(0).n(5).k(4).test();
    SgemmTester().config(*cfg).m(3).n(0).k(4).packed(false).test();
  }
}

TEST_CASE("sgemm: Qwen3 projection shapes", "[sgemm]") {
  ThreadPool pool(2);
  const SgemmConfig& cfg = sgemm_config();
  SgemmTester().config(cfg).pool(&pool).m(1).n(2048).k(1024).test();
  SgemmTester().config(cfg).pool(&pool).m(16).n(1024).k(3072).test();
  SgemmTester().config(cfg).pool(&pool).m(128).n(1024).k(1024).bias(true).test();
}

// ---------------------------------------------------------------------------
// The ops, through a one-node graph and a Session.

namespace {

using test::OpTest;
using test::make_tensor_as;
using test::to_doubles;

std::vector<double> random_values(int64_t n, unsigned seed, bool small_ints) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::uniform_int_distribution<int> ints(0, 6);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = small_ints ? ints(rng) : static_cast<float>(dist(rng));
  return v;
}

// numpy.matmul in double, written independently of ops/matmul_shape: the
// result, its shape and Σ|a·b| per element (for the error bound).
struct RefResult {
  Shape shape;
  std::vector<double> value, magnitude;
};

RefResult reference_matmul(Shape a_shape, const std::vector<double>& a, Shape b_shape, const std::vector<double>& b) {
  const bool a1 = a_shape.size() == 1, b1 = b_shape.size() == 1;
  if (a1) a_shape.insert(a_shape.begin(), 1);
  if (b1) b_shape.push_back(1);
  const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
  Shape ab(a_shape.begin(), a_shape.end() - 2), bb(b_shape.begin(), b_shape.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  while (ab.size() < rank) ab.insert(ab.begin(), 1);
  while (bb.size() < rank) bb.insert(bb.begin(), 1);
  Shape ob(rank);
  for (size_t d = 0; d < rank; ++d) ob[d] = ab[d] == 1 ? bb[d] : ab[d];
  RefResult r;
  r.shape = ob;
  if (!a1) r.shape.push_back(m);
  if (!b1) r.shape.push_back(n);
  int64_t batches = 1;
  for (int64_t d : ob) batches *= d;
  for (int64_t o = 0; o < batches; ++o) {
    int64_t rem = o, ai = 0, bi = 0, as = 1, bs = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t idx = rem % ob[d];
      rem /= ob[d];
      ai += (ab[d] == 1 ? 0 : idx) * as;
      bi += (bb[d] == 1 ? 0 : idx) * bs;
      as *= ab[d];
      bs *= bb[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double p = a[static_cast<size_t>(ai * m * k + i * k + kk)] * b[static_cast<size_t>(bi * k * n + kk * n + j)];
          acc += p;
          mag += std::fabs(p);
        }
        r.value.push_back(acc);
        r.magnitude.push_back(mag);
      }
  }
  return r;
}

// Runs MatMul on `dtype` tensors of the given shapes (B constant or fed) and
// checks it against the reference: within the K-scaled bound for float32,
// exactly for the other types (their values are small integers).
void check_matmul(DType dtype, const Shape& a_shape, const Shape& b_shape, bool b_constant, int threads = 1) {
  INFO("MatMul " << dtype_name(dtype) << " A" << shape_str(a_shape) << " B" << shape_str(b_shape)
                 << (b_constant ? " constant" : "") << " threads=" << threads);
  const bool exact = dtype != DType::F32;
  const auto a = random_values(numel(a_shape), 11, exact), b = random_values(numel(b_shape), 12, exact);
  const RefResult ref = reference_matmul(a_shape, a, b_shape, b);
  OpTest t("MatMul", 21);
  t.input(make_tensor_as(dtype, a_shape, a));
  if (b_constant) t.constant(make_tensor_as(dtype, b_shape, b));
  else t.input(make_tensor_as(dtype, b_shape, b));
  const std::vector<Tensor> y = t.threads(threads).run(2);
  REQUIRE(y.size() == 1);
  CHECK(y[0].dtype() == dtype);
  REQUIRE(y[0].shape() == ref.shape);
  const std::vector<double> got = to_doubles(y[0]);
  const int64_t k = a_shape.back();
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = exact ? 0.0 : 2.0 * double(k + 1) * std::ldexp(1.0, -24) * ref.magnitude[i];
    if (!(std::fabs(got[i] - ref.value[i]) <= tol) && bad++ < 5)
      FAIL_CHECK("Y[" << i << "] = " << got[i] << ", expected " << ref.value[i]);
  }
}

std::string error_of(const OpTest& t) {
  try {
    t.run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("MatMul: float32 2-D, constant and fed B", "[matmul]") {
  for (int threads : {1, 2})
    for (bool constant : {true, false})
      for (int64_t m : {1, 7, 37}) check_matmul(DType::F32, {m, 300}, {300, 70}, constant, threads);
}

TEST_CASE("MatMul: 1-D operands", "[matmul]") {
  for (bool constant : {true, false}) {
    check_matmul(DType::F32, {40}, {40, 9}, constant);
    check_matmul(DType::F32, {5, 40}, {40}, constant);
    check_matmul(DType::F32, {40}, {40}, constant);
    check_matmul(DType::F32, {2, 3, 40}, {40}, constant);
    check_matmul(DType::F32, {40}, {2, 40, 9}, constant);
  }
}

TEST_CASE("MatMul: batch dims broadcast", "[matmul]") {
  for (int threads : {1, 2})
    for (bool constant : {true, false}) {
      check_matmul(DType::F32, {1, 7, 64}, {64, 33}, constant, threads);        // activations · weight
      check_matmul(DType::F32, {2, 3, 5, 64}, {64, 33}, constant, threads);     // batches fold into M
      check_matmul(DType::F32, {2, 1, 5, 16}, {3, 16, 7}, constant, threads);   // both sides broadcast
      check_matmul(DType::F32, {5, 16}, {4, 16, 7}, constant, threads);         // A shared
      check_matmul(DType::F32, {3, 1, 4, 8}, {1, 5, 8, 6}, constant, threads);
    }
}

TEST_CASE("MatMul: attention-shaped batched products", "[matmul]") {
  for (int threads : {1, 2}) {
    // Decode: one query row per head against the cache; prefill: a square block.
    check_matmul(DType::F32, {1, 16, 1, 128}, {1, 16, 128, 77}, false, threads);   // Q·Kᵀ
    check_matmul(DType::F32, {1, 16, 1, 77}, {1, 16, 77, 128}, false, threads);    // P·V
    check_matmul(DType::F32, {1, 16, 45, 128}, {1, 16, 128, 45}, false, threads);
    check_matmul(DType::F32, {1, 16, 45, 45}, {1, 16, 45, 128}, false, threads);
  }
}

TEST_CASE("MatMul: every dtype", "[matmul]") {
  for (DType t : {DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U32, DType::U64})
    for (bool constant : {true, false}) {
      check_matmul(t, {3, 9}, {9, 4}, constant);
      check_matmul(t, {2, 1, 3, 9}, {2, 9, 4}, constant, 2);
      check_matmul(t, {9}, {9}, constant);
    }
}

TEST_CASE("MatMul: empty dims", "[matmul]") {
  check_matmul(DType::F32, {0, 8}, {8, 5}, true);
  check_matmul(DType::F32, {3, 0}, {0, 5}, false);
  check_matmul(DType::F32, {3, 0}, {0, 5}, true);
  check_matmul(DType::F32, {0, 3, 8}, {8, 5}, false);
}

TEST_CASE("MatMul: bad inputs name the shapes", "[matmul]") {
  auto f32 = [](Shape s) { return make_tensor_as(DType::F32, s, std::vector<double>(size_t(numel(s)), 1.0)); };
  std::string e = error_of(OpTest("MatMul").input(f32({2, 1024})).constant(f32({3072, 1024})));
  CHECK_THAT(e, Catch::Contains("input B has shape [3072,1024], expected K=1024 to match A [2,1024]"));
  CHECK_THAT(e, Catch::Contains("(MatMul)"));
  e = error_of(OpTest("MatMul").input(f32({2, 3, 4})).input(f32({5, 4, 6})));
  CHECK_THAT(e, Catch::Contains("batch dims of A [2,3,4] and B [5,4,6] do not broadcast"));
  e = error_of(OpTest("MatMul").input(f32({2, 4})).input(make_tensor_as(DType::F64, {4, 2}, std::vector<double>(8))));
  CHECK_THAT(e, Catch::Contains("inputs are float32 and float64"));
  e = error_of(OpTest("MatMul").input(make_tensor_as(DType::I8, {2, 4}, std::vector<double>(8)))
                   .input(make_tensor_as(DType::I8, {4, 2}, std::vector<double>(8))));
  CHECK_THAT(e, Catch::Contains("MatMul does not support int8"));
}

TEST_CASE("MatMul: describe names the packed weight and kernels", "[matmul]") {
  Graph g = OpTest("MatMul")
                .input(make_tensor_as(DType::F32, {1, 64}, std::vector<double>(64, 1.0)))
                .constant(make_tensor_as(DType::F32, {64, 40}, std::vector<double>(64 * 40, 1.0)))
                .graph();
  const OpEntry* e = OpRegistry::global().find("", "MatMul", 21);
  REQUIRE(e);
  const auto kernel = e->create(KernelInfo(g, g.nodes[0]));
  CHECK_THAT(kernel->describe(), Catch::Contains("B packed [64,40]"));
  CHECK_THAT(kernel->describe(), Catch::Contains(sgemm_config().gemm_name));
}

// ---------------------------------------------------------------------------
// Gemm

namespace {

struct GemmCase {
  int64_t m = 5, k = 40, n = 37;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 1.0f;
  std::optional<Shape> c_shape;  // absent: no C
  bool b_constant = false;
  DType dtype = DType::F32;
  int threads = 1;
};

void check_gemm(const GemmCase& g) {
  INFO("Gemm " << dtype_name(g.dtype) << " m=" << g.m << " k=" << g.k << " n=" << g.n << " transA=" << g.trans_a
               << " transB=" << g.trans_b << " alpha=" << g.alpha << " beta=" << g.beta
               << " C=" << (g.c_shape ? shape_str(*g.c_shape) : "none") << " constant B=" << g.b_constant
               << " threads=" << g.threads);
  const bool exact = g.dtype != DType::F32;
  const Shape a_shape = g.trans_a ? Shape{g.k, g.m} : Shape{g.m, g.k};
  const Shape b_shape = g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n};
  const auto a = random_values(numel(a_shape), 21, exact), b = random_values(numel(b_shape), 22, exact);
  const auto c = g.c_shape ? random_values(numel(*g.c_shape), 23, exact) : std::vector<double>{};
  OpTest t("Gemm", 13);
  t.attr("transA", int64_t{g.trans_a}).attr("transB", int64_t{g.trans_b}).attr("alpha", g.alpha).attr("beta", g.beta);
  t.input(make_tensor_as(g.dtype, a_shape, a));
  if (g.b_constant) t.constant(make_tensor_as(g.dtype, b_shape, b));
  else t.input(make_tensor_as(g.dtype, b_shape, b));
  if (g.c_shape) t.input(make_tensor_as(g.dtype, *g.c_shape, c));
  const std::vector<Tensor> y = t.threads(g.threads).run();
  REQUIRE(y[0].shape() == Shape{g.m, g.n});
  const std::vector<double> got = to_doubles(y[0]);
  // C broadcast right-aligned onto [M,N].
  const Shape cs = g.c_shape ? *g.c_shape : Shape{};
  const int64_t c_rows = cs.size() == 2 ? cs[0] : 1, c_cols = cs.empty() ? 1 : cs.back();
  size_t bad = 0;
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t kk = 0; kk < g.k; ++kk) {
        const double av = g.trans_a ? a[size_t(kk * g.m + i)] : a[size_t(i * g.k + kk)];
        const double bv = g.trans_b ? b[size_t(j * g.k + kk)] : b[size_t(kk * g.n + j)];
        acc += av * bv;
        mag += std::fabs(av * bv);
      }
      double ref = double(g.alpha) * acc;
      if (g.c_shape) ref += double(g.beta) * c[size_t((c_rows == 1 ? 0 : i) * c_cols + (c_cols == 1 ? 0 : j))];
      const double tol = exact ? 0.0 : 2.0 * double(g.k + 3) * std::ldexp(1.0, -24) * (mag * std::fabs(g.alpha) + 2.0);
      const double v = got[size_t(i * g.n + j)];
      if (!(std::fabs(v - ref) <= tol) && bad++ < 5) FAIL_CHECK("Y[" << i << "][" << j << "] = " << v << ", expected " << ref);
    }
}

}  // namespace

TEST_CASE("Gemm: transposes, constant B, threads", "[gemm]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool constant : {false, true})
        for (int64_t m : {1, 5, 40}) {
          GemmCase g;
          g.m = m;
          g.trans_a = ta;
          g.trans_b = tb;
          g.b_constant = constant;
          g.c_shape = Shape{g.n};
          g.threads = m == 40 ? 2 : 1;
          check_gemm(g);
        }
}

TEST_CASE("Gemm: alpha, beta and C broadcasting", "[gemm]") {
  const int64_t m = 6, n = 37;
  for (const std::optional<Shape>& c : {std::optional<Shape>{}, std::optional<Shape>{Shape{}},
                                        std::optional<Shape>{Shape{1}}, std::optional<Shape>{Shape{n}},
                                        std::optional<Shape>{Shape{1, n}}, std::optional<Shape>{Shape{m, 1}},
                                        std::optional<Shape>{Shape{m, n}}})
    for (auto [alpha, beta] : {std::pair{1.0f, 1.0f}, std::pair{0.5f, 1.0f}, std::pair{1.0f, -2.0f},
                               std::pair{2.0f, 0.0f}})
      for (bool constant : {false, true}) {
        GemmCase g;
        g.m = m;
        g.n = n;
        g.c_shape = c;
        g.alpha = alpha;
        g.beta = beta;
        g.b_constant = constant;
        g.trans_b = constant;
        check_gemm(g);
      }
}

TEST_CASE("Gemm: other dtypes", "[gemm]") {
  for (DType t : {DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U32, DType::U64}) {
    GemmCase g;
    g.dtype = t;
    g.m = 3;
    g.k = 7;
    g.n = 4;
    g.c_shape = Shape{3, 1};
    check_gemm(g);
    g.trans_a = g.trans_b = true;
    g.alpha = 2.0f;
    g.c_shape = Shape{4};
    check_gemm(g);
  }
}

TEST_CASE("Gemm: bad shapes", "[gemm]") {
  auto f32 = [](Shape s) { return make_tensor_as(DType::F32, s, std::vector<double>(size_t(numel(s)), 1.0)); };
  CHECK_THAT(error_of(OpTest("Gemm", 13).input(f32({2, 8})).input(f32({7, 3}))),
             Catch::Contains("input B has shape [7,3] (transB=0), expected K=8 to match A [2,8] (transA=0)"));
  CHECK_THAT(error_of(OpTest("Gemm", 13).input(f32({2, 8})).input(f32({8, 3})).input(f32({2, 2}))),
             Catch::Contains("input C has shape [2,2], which does not broadcast to [2,3]"));
  CHECK_THAT(error_of(OpTest("Gemm", 13).input(f32({2, 2, 8})).input(f32({8, 3}))),
             Catch::Contains("input A has shape [2,2,8], expected rank 2"));
}

// ---------------------------------------------------------------------------
// MatMulInteger

namespace {

// zero points: empty shape list entry = input omitted.
void check_matmul_integer(DType ta, DType tb, const Shape& a_shape, const Shape& b_shape,
                          std::optional<Shape> za_shape, std::optional<Shape> zb_shape, int threads = 1) {
  INFO("MatMulInteger " << dtype_name(ta) << "x" << dtype_name(tb) << " A" << shape_str(a_shape) << " B"
                        << shape_str(b_shape) << " za" << (za_shape ? shape_str(*za_shape) : "-") << " zb"
                        << (zb_shape ? shape_str(*zb_shape) : "-"));
  auto bytes = [](DType t, int64_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> d(t == DType::U8 ? 0 : -128, t == DType::U8 ? 255 : 127);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = d(rng);
    return v;
  };
  const auto a = bytes(ta, numel(a_shape), 31), b = bytes(tb, numel(b_shape), 32);
  const auto za = za_shape ? bytes(ta, numel(*za_shape), 33) : std::vector<double>{};
  const auto zb = zb_shape ? bytes(tb, numel(*zb_shape), 34) : std::vector<double>{};
  // Subtract the zero points, then reuse the float reference (exact in double).
  const int64_t m = a_shape.size() == 1 ? 1 : a_shape[a_shape.size() - 2], k = a_shape.back();
  const int64_t n = b_shape.size() == 1 ? 1 : b_shape.back();
  std::vector<double> a0 = a, b0 = b;
  for (size_t i = 0; i < a0.size(); ++i) {
    const size_t row = i / size_t(k);  // rows of all batches in order
    a0[i] -= za.empty() ? 0 : za.size() == 1 ? za[0] : za.size() == size_t(m) ? za[row % size_t(m)] : za[row];
  }
  for (size_t i = 0; i < b0.size(); ++i) {
    const size_t col = i % size_t(n), mat = i / size_t(k * n);
    b0[i] -= zb.empty() ? 0 : zb.size() == 1 ? zb[0] : zb.size() == size_t(n) ? zb[col] : zb[mat * size_t(n) + col];
  }
  const RefResult ref = reference_matmul(a_shape, a0, b_shape, b0);
  OpTest t("MatMulInteger", 10);
  t.input(make_tensor_as(ta, a_shape, a)).input(make_tensor_as(tb, b_shape, b));
  if (za_shape) t.input(make_tensor_as(ta, *za_shape, za));
  else t.omit();
  if (zb_shape) t.constant(make_tensor_as(tb, *zb_shape, zb));
  const std::vector<Tensor> y = t.threads(threads).run();
  CHECK(y[0].dtype() == DType::I32);
  REQUIRE(y[0].shape() == ref.shape);
  CHECK(to_doubles(y[0]) == ref.value);
}

}  // namespace

TEST_CASE("MatMulInteger: types and zero points", "[matmul_integer]") {
  for (DType ta : {DType::U8, DType::I8})
    for (DType tb : {DType::U8, DType::I8}) {
      check_matmul_integer(ta, tb, {4, 33}, {33, 9}, std::nullopt, std::nullopt);
      check_matmul_integer(ta, tb, {4, 33}, {33, 9}, Shape{}, Shape{});
      check_matmul_integer(ta, tb, {4, 33}, {33, 9}, Shape{4}, Shape{9}, 2);
      check_matmul_integer(ta, tb, {33}, {33, 9}, Shape{1}, Shape{1, 9});
    }
}

TEST_CASE("MatMulInteger: batched, per-batch zero points", "[matmul_integer]") {
  check_matmul_integer(DType::U8, DType::I8, {2, 3, 16}, {16, 5}, Shape{2, 3, 1}, Shape{5}, 2);
  check_matmul_integer(DType::U8, DType::U8, {2, 3, 16}, {2, 16, 5}, Shape{3}, Shape{2, 1, 5});
  check_matmul_integer(DType::I8, DType::I8, {3, 16}, {4, 16, 5}, Shape{}, Shape{4, 1, 5});
}

TEST_CASE("MatMulInteger: bad zero points", "[matmul_integer]") {
  auto u8 = [](Shape s) { return make_tensor_as(DType::U8, s, std::vector<double>(size_t(numel(s)), 1.0)); };
  CHECK_THAT(error_of(OpTest("MatMulInteger", 10).input(u8({4, 8})).input(u8({8, 3})).input(u8({3}))),
             Catch::Contains("a_zero_point has shape [3] (3 values), expected 1, 4 (one per row of A) or 4"));
  CHECK_THAT(error_of(OpTest("MatMulInteger", 10)
                          .input(u8({4, 8}))
                          .input(u8({8, 3}))
                          .omit()
                          .input(make_tensor_as(DType::I8, {1}, {0.0}))),
             Catch::Contains("input b_zero_point is int8, expected uint8 like B"));
  CHECK_THAT(error_of(OpTest("MatMulInteger", 10).input(make_tensor_as(DType::F32, {1, 2}, {0.0, 0.0})).input(u8({2, 1}))),
             Catch::Contains("input A is float32, MatMulInteger takes uint8 or int8"));
}
