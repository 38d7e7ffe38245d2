// The MatMul, Gemm and MatMulInteger ops through a one-node graph and a
// Session, against a double-precision numpy.matmul written here. The GEMM
// microkernels under them are tested in test_sgemm.cpp.
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

#include "graph/kernel.h"
#include "graph/op_registry.h"
#include "ops/register_ops.h"
#include "ops/sgemm.h"
#include "base/thread_pool.h"
#include "tests/op_test_util.h"

using namespace onebit;

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
    // bfloat16: exact sums of exact products in float32, rounded once to 8 bits.
    const double tol = dtype == DType::BF16 ? std::ldexp(std::fabs(ref.value[i]), -8)
                       : exact             ? 0.0
                                           : 2.0 * double(k + 1) * std::ldexp(1.0, -24) * ref.magnitude[i];
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

TEST_CASE("MatMul: bfloat16 on the float32 GEMM, each output rounded once", "[matmul][bf16]") {
  for (int threads : {1, 2})
    for (bool constant : {true, false})
      for (int64_t m : {1, 7}) check_matmul(DType::BF16, {m, 300}, {300, 70}, constant, threads);
  Graph g = OpTest("MatMul")
                .input(make_tensor_as(DType::BF16, {1, 64}, std::vector<double>(64, 1.0)))
                .constant(make_tensor_as(DType::BF16, {64, 40}, std::vector<double>(64 * 40, 1.0)))
                .graph();
  const auto kernel = default_op_registry().find("", "MatMul", 21)->create(KernelInfo(g, g.nodes[0], nullptr, {}));
  CHECK_THAT(kernel->describe(), Catch::Contains("bf16 (widened to f32) B packed [64,40]"));
  CHECK(kernel->packs_constant(1));  // the bfloat16 original may be released
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

TEST_CASE("MatMul: describe names the packed weight, or the weight read in place, and the kernels", "[matmul]") {
  Graph g = OpTest("MatMul")
                .input(make_tensor_as(DType::F32, {1, 64}, std::vector<double>(64, 1.0)))
                .constant(make_tensor_as(DType::F32, {64, 40}, std::vector<double>(64 * 40, 1.0)))
                .graph();
  const OpEntry* e = default_op_registry().find("", "MatMul", 21);
  REQUIRE(e);
  SECTION("map_weights off (--pack-weights): packed once at create") {
    KernelOptions options;
    options.map_weights = false;
    const auto kernel = e->create(KernelInfo(g, g.nodes[0], nullptr, options));
    CHECK_THAT(kernel->describe(), Catch::Contains("B packed [64,40]"));
    CHECK_THAT(kernel->describe(), Catch::Contains(sgemm_config().gemm_name));
    CHECK(kernel->packs_constant(1));  // the original may be released
  }
  SECTION("default: read where it lies") {
    const KernelOptions options;
    const auto kernel = e->create(KernelInfo(g, g.nodes[0], nullptr, options));
    CHECK_THAT(kernel->describe(), Catch::Contains("B [64,40] read in place"));
    CHECK_THAT(kernel->describe(), Catch::Contains(sgemm_config().axpy_name));
    CHECK_FALSE(kernel->packs_constant(1));  // the graph keeps the weight: the kernel reads it
  }
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
