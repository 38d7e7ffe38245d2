#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "op_test_util.h"
#include "graph/op_registry.h"
#include "ops/register_ops.h"
#include "ops/softmax.h"
#include "quant/ukernels/kernel_config.h"

using namespace onebit;
using namespace onebit::test;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Double-precision softmax / logsoftmax of x [outer, n, inner] along n.
std::vector<double> reference(const std::vector<double>& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return static_cast<size_t>((o * n + k) * inner + i); };
      double m = -kInf, s = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  return y;
}

std::vector<double> random_values(size_t n, double scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(d(rng)));
  return v;
}
}  // namespace

TEST_CASE("softmax family is registered for opsets 17-21", "[softmax]") {
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"})
    for (int64_t v = 17; v <= 21; ++v) CHECK(default_op_registry().find("", op, v) != nullptr);
}

TEST_CASE("Softmax on a hand-computed row", "[softmax]") {
  const Tensor y = OpTest("Softmax").input(make_tensor<float>({1, 3}, {1, 2, 3})).run1();
  const double e1 = std::exp(-2.0), e2 = std::exp(-1.0), s = e1 + e2 + 1;
  CHECK(all_close(to_doubles(y), {e1 / s, e2 / s, 1 / s}, 1e-6));
  const Tensor l = OpTest("LogSoftmax").input(make_tensor<float>({1, 3}, {1, 2, 3})).run1();
  CHECK(all_close(to_doubles(l), {-2 - std::log(s), -1 - std::log(s), -std::log(s)}, 1e-6));
}

TEST_CASE("Softmax and LogSoftmax match a double reference on every axis", "[softmax]") {
  const Shape shape{3, 37, 70};
  const auto x = random_values(3 * 37 * 70, 20, 7);
  for (int64_t axis : {0, 1, 2, -1, -2}) {
    const int64_t a = axis < 0 ? axis + 3 : axis;
    const int64_t outer = a == 0 ? 1 : a == 1 ? 3 : 3 * 37, n = shape[static_cast<size_t>(a)];
    const int64_t inner = a == 0 ? 37 * 70 : a == 1 ? 70 : 1;
    for (bool log : {false, true}) {
      INFO("axis " << axis << (log ? " LogSoftmax" : " Softmax"));
      const Tensor y = OpTest(log ? "LogSoftmax" : "Softmax").threads(2).attr("axis", axis)
                           .input(make_tensor_as(DType::F32, shape, x)).run1();
      CHECK(all_close(to_doubles(y), reference(x, outer, n, inner, log), 1e-6, 1e-7));
    }
  }
}

TEST_CASE("Softmax is stable for large inputs and handles -inf", "[softmax]") {
  const Tensor y = OpTest("Softmax").input(make_tensor_as(DType::F32, {4}, {1000, 1000, -kInf, 999})).run1();
  const double s = 2 + std::exp(-1.0);
  CHECK(all_close(to_doubles(y), {1 / s, 1 / s, 0, std::exp(-1.0) / s}, 1e-6));
  const Tensor l = OpTest("LogSoftmax").input(make_tensor_as(DType::F32, {2}, {-kInf, 0})).run1();
  CHECK(all_close(to_doubles(l), {-kInf, 0}));
  const auto n = to_doubles(OpTest("Softmax").input(make_tensor_as(DType::F32, {2}, {kNaN, 0})).run1());
  CHECK((std::isnan(n[0]) && std::isnan(n[1])));
}

TEST_CASE("Softmax rows long enough for the vector max: NaN in any lane or the tail, -inf masks", "[softmax]") {
  // 19 elements: two 8-lane blocks and a 3-element tail. A NaN anywhere
  // makes the whole row NaN; -inf entries (masked scores) are exactly 0 and
  // never mistaken for NaN; the maximum may sit in any lane or in the tail.
  const int64_t n = 19;
  for (int64_t at = 0; at < n; ++at) {
    INFO("position " << at);
    std::vector<double> row = random_values(static_cast<size_t>(n), 4, static_cast<unsigned>(at));
    row[static_cast<size_t>(at)] = kNaN;
    const auto y = to_doubles(OpTest("Softmax").input(make_tensor_as(DType::F32, {1, n}, row)).run1());
    for (double v : y) CHECK(std::isnan(v));

    std::vector<double> masked(static_cast<size_t>(n), -kInf);
    masked[static_cast<size_t>(at)] = 30;  // the maximum, alone
    masked[static_cast<size_t>((at + 5) % n)] = 29;
    const auto z = to_doubles(OpTest("Softmax").input(make_tensor_as(DType::F32, {1, n}, masked)).run1());
    CHECK(all_close(z, reference(masked, 1, n, 1, false), 1e-6, 1e-7));
    for (int64_t k = 0; k < n; ++k)
      if (masked[static_cast<size_t>(k)] == -kInf) CHECK(z[static_cast<size_t>(k)] == 0);
  }
}

namespace {

// The float32 row as the kernel computes it over every entry: the max, exp
// of x − max by the one vectorised exp, the sum in double over groups of 8
// lanes and the tail, one division each.
std::vector<float> softmax_every_entry(const std::vector<float>& x) {
  const size_t n = x.size();
  float m = -std::numeric_limits<float>::infinity();
  for (float v : x) m = v > m ? v : m;
  std::vector<float> y(n);
  for (size_t k = 0; k < n; ++k) y[k] = x[k] - m;
  vec_math_config().exp(n, y.data(), y.data());
  double sums[8] = {}, sum = 0;
  size_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (size_t j = 0; j < 8; ++j) sums[j] += y[k + j];
  for (; k < n; ++k) sum += y[k];
  for (double v : sums) sum += v;
  const float total = static_cast<float>(sum);
  for (float& v : y) v = v / total;
  return y;
}

}  // namespace

// A row's trailing entries far below its maximum (a causal mask's, or just
// small) are left out of the exp and the sum: the same bits as computing
// every entry, for tails of every length against the 8-lane groups, masks
// of -inf, the lowest float and -1e30, and inside the tail a value whose
// exp is tiny but not 0 (85 below the maximum) and values either side of
// the cut (104 below).
TEST_CASE("Softmax leaves out a row's negligible tail without changing a bit", "[softmax]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const float lowest = std::numeric_limits<float>::lowest();
  for (float masked : {-std::numeric_limits<float>::infinity(), lowest, -1e30f})
    for (int64_t n : {1, 7, 8, 9, 23, 64, 70})
      for (int64_t kept = 1; kept <= n; ++kept) {
        INFO("n " << n << " kept " << kept << " mask " << masked);
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] = j < kept ? dist(rng) : masked;
        if (kept + 3 < n) {
          const float top = *std::max_element(row.begin(), row.begin() + kept);
          row[static_cast<size_t>(kept)] = top - 85.0f;        // exp not 0: must be computed
          row[static_cast<size_t>(kept + 1)] = top - 103.9f;   // inside the cut
          row[static_cast<size_t>(kept + 2)] = top - 104.5f;   // past it, before more masked entries
        }
        const Tensor y = OpTest("Softmax").input(make_tensor<float>({1, n}, row)).run1();
        const std::vector<float> want = softmax_every_entry(row);
        CHECK(std::memcmp(y.data<float>(), want.data(), want.size() * sizeof(float)) == 0);
      }
}

TEST_CASE("softmax_row over softmax_prefix gives the whole row's entries, the rest 0", "[softmax]") {
  // A fused node that knows where a row's masked keys start runs Softmax on
  // a prefix only (ops/gqa_matmul.cpp): whole groups of lanes, at most n.
  CHECK(softmax_prefix(1, 70) == 8);
  CHECK(softmax_prefix(8, 70) == 8);
  CHECK(softmax_prefix(9, 70) == 16);
  CHECK(softmax_prefix(64, 70) == 64);
  CHECK(softmax_prefix(65, 70) == 70);
  CHECK(softmax_prefix(70, 70) == 70);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (float masked : {-std::numeric_limits<float>::infinity(), -1e30f})
    for (int64_t n : {1, 7, 8, 9, 23, 64, 70, 301})
      for (int64_t kept = 1; kept <= n; ++kept) {
        INFO("n " << n << " kept " << kept << " mask " << masked);
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] = j < kept ? dist(rng) : masked;
        if (kept > 2) row[static_cast<size_t>(kept - 1)] = *std::max_element(row.begin(), row.begin() + kept) - 103.9f;
        std::vector<float> whole(row.size()), part(row.size(), -1.0f);
        softmax_row(row.data(), whole.data(), n);
        const int64_t p = softmax_prefix(kept, n);
        REQUIRE(p >= kept);
        softmax_row(row.data(), part.data(), p);
        CHECK(std::memcmp(part.data(), whole.data(), static_cast<size_t>(p) * sizeof(float)) == 0);
        for (int64_t j = p; j < n; ++j) CHECK(whole[static_cast<size_t>(j)] == 0.0f);
      }
}

TEST_CASE("Softmax on f16, bf16 and f64", "[softmax]") {
  const auto x = random_values(2 * 10, 4, 3);
  const auto want = reference(x, 2, 10, 1, false);
  const Tensor h = OpTest("Softmax").input(make_tensor_as(DType::F16, {2, 10}, x)).run1();
  CHECK(h.dtype() == DType::F16);
  std::vector<double> xh = to_doubles(make_tensor_as(DType::F16, {2, 10}, x));
  CHECK(all_close(to_doubles(h), reference(xh, 2, 10, 1, false), 1e-3, 1e-4));
  const Tensor d = OpTest("Softmax").input(make_tensor_as(DType::F64, {2, 10}, x)).run1();
  CHECK(all_close(to_doubles(d), want, 1e-13, 0));
  const Tensor b = OpTest("LogSoftmax").attr("axis", int64_t{0}).input(make_tensor_as(DType::BF16, {2, 10}, x)).run1();
  CHECK(b.dtype() == DType::BF16);
}

TEST_CASE("Hardmax picks the first maximum", "[softmax][hardmax]") {
  const Tensor y = OpTest("Hardmax").input(make_tensor<float>({2, 4}, {3, 1, 3, 2, -1, -1, -1, -1})).run1();
  CHECK(values<float>(y) == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0});
  const Tensor c = OpTest("Hardmax").attr("axis", int64_t{0}).input(make_tensor<float>({2, 3}, {1, 5, 2, 4, 5, 0}))
                       .run1();
  CHECK(values<float>(c) == std::vector<float>{0, 1, 1, 1, 0, 0});
}

TEST_CASE("softmax family edge cases", "[softmax]") {
  CHECK(OpTest("Softmax").input(make_tensor<float>({0, 3}, {})).run1().shape() == Shape{0, 3});
  CHECK(OpTest("Softmax").attr("axis", int64_t{0}).input(make_tensor<float>({0, 3}, {})).run1().shape() == Shape{0, 3});
  CHECK_THROWS_WITH(OpTest("Softmax").attr("axis", int64_t{2}).input(make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6})).run(),
                    Catch::Contains("axis"));
  CHECK_THROWS_WITH(OpTest("Softmax").input(make_tensor<int32_t>({1}, {1})).run(), Catch::Contains("int32"));
}
