#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "op_test_util.h"
#include "graph/op_registry.h"
#include "ops/register_ops.h"

using namespace onebit;
using namespace onebit::test;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// x = [[[1,2],[3,4],[5,6]], [[7,8],[9,10],[11,12]]], shape [2,3,2]
Tensor x232() { return make_tensor<float>({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}); }

OpTest reduce(const char* op, const std::vector<int64_t>& axes, int64_t keepdims = 1, int64_t opset = 21) {
  OpTest t(op, opset);
  t.attr("keepdims", keepdims);
  if (opset >= 18 || std::string(op) == "ReduceSum") {
    t.input(x232());
    if (!axes.empty()) t.constant(make_tensor<int64_t>({static_cast<int64_t>(axes.size())}, axes));
  } else {
    if (!axes.empty()) t.attr("axes", axes);
    t.input(x232());
  }
  return t;
}
}  // namespace

TEST_CASE("reductions are registered for opsets 17-21", "[reduce]") {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})
    for (int64_t v = 17; v <= 21; ++v) {
      INFO(op << " opset " << v);
      CHECK(default_op_registry().find("", op, v) != nullptr);
    }
}

TEST_CASE("ReduceSum over each axis pattern", "[reduce]") {
  Tensor y = reduce("ReduceSum", {1}).run1();
  CHECK(y.shape() == Shape{2, 1, 2});
  CHECK(values<float>(y) == std::vector<float>{9, 12, 27, 30});
  y = reduce("ReduceSum", {-1}, 0).run1();
  CHECK(y.shape() == Shape{2, 3});
  CHECK(values<float>(y) == std::vector<float>{3, 7, 11, 15, 19, 23});
  y = reduce("ReduceSum", {0, 2}, 0).run1();
  CHECK(values<float>(y) == std::vector<float>{18, 26, 34});
  y = reduce("ReduceSum", {}, 1).run1();
  CHECK(y.shape() == Shape{1, 1, 1});
  CHECK(values<float>(y) == std::vector<float>{78});
  y = reduce("ReduceSum", {0}, 0).run1();
  CHECK(values<float>(y) == std::vector<float>{8, 10, 12, 14, 16, 18});
}

TEST_CASE("every reduction on hand-computed values", "[reduce]") {
  auto last = [](const char* op) { return to_doubles(reduce(op, {-1}, 0).run1()); };
  CHECK(all_close(last("ReduceMean"), {1.5, 3.5, 5.5, 7.5, 9.5, 11.5}));
  CHECK(all_close(last("ReduceMax"), {2, 4, 6, 8, 10, 12}));
  CHECK(all_close(last("ReduceMin"), {1, 3, 5, 7, 9, 11}));
  CHECK(all_close(last("ReduceProd"), {2, 12, 30, 56, 90, 132}));
  CHECK(all_close(last("ReduceL1"), {3, 7, 11, 15, 19, 23}));
  CHECK(all_close(last("ReduceSumSquare"), {5, 25, 61, 113, 181, 265}));
  CHECK(all_close(last("ReduceL2"), {std::sqrt(5.), 5, std::sqrt(61.), std::sqrt(113.), std::sqrt(181.), std::sqrt(265.)}));
  CHECK(all_close(last("ReduceLogSum"), {std::log(3.), std::log(7.), std::log(11.), std::log(15.), std::log(19.), std::log(23.)}));
  auto lse = [](double a, double b) { return std::log(std::exp(a) + std::exp(b)); };
  CHECK(all_close(last("ReduceLogSumExp"), {lse(1, 2), lse(3, 4), lse(5, 6), lse(7, 8), lse(9, 10), lse(11, 12)}));
  // Middle axis (the innermost kept) path.
  CHECK(all_close(to_doubles(reduce("ReduceMax", {1}).run1()), {5, 6, 11, 12}));
  CHECK(all_close(to_doubles(reduce("ReduceMean", {0, 1}).run1()), {6, 7}));
}

TEST_CASE("axes as an attribute before opset 18", "[reduce]") {
  const Tensor y = reduce("ReduceMean", {1}, 0, 17).run1();
  CHECK(y.shape() == Shape{2, 2});
  CHECK(values<float>(y) == std::vector<float>{3, 4, 9, 10});
  CHECK_THROWS_WITH(OpTest("ReduceMean", 18).attr("axes", std::vector<int64_t>{1}).input(x232()).run(),
                    Catch::Contains("'axes'"));
}

TEST_CASE("noop_with_empty_axes keeps the elementwise part", "[reduce]") {
  const Tensor x = make_tensor<float>({2}, {3, -4});
  CHECK(values<float>(OpTest("ReduceSumSquare").attr("noop_with_empty_axes", int64_t{1}).input(x).run1()) ==
        std::vector<float>{9, 16});
  CHECK(values<float>(OpTest("ReduceSum").attr("noop_with_empty_axes", int64_t{1}).input(x).constant(
            make_tensor<int64_t>({0}, {})).run1()) == std::vector<float>{3, -4});
  CHECK(all_close(to_doubles(OpTest("ReduceLogSum").attr("noop_with_empty_axes", int64_t{1}).input(x).run1()),
                  {std::log(3.0), kNaN}));
  // Without noop, empty axes reduce everything.
  CHECK(values<float>(OpTest("ReduceSum").attr("keepdims", int64_t{0}).input(x).constant(
            make_tensor<int64_t>({0}, {})).run1()) == std::vector<float>{-1});
}

TEST_CASE("reductions over an empty set give the identity", "[reduce]") {
  const Tensor e = make_tensor<float>({2, 0, 4}, {});
  const Tensor axes = make_tensor<int64_t>({1}, {1});
  auto run = [&](const char* op) { return to_doubles(OpTest(op).input(e).constant(axes).run1()); };
  CHECK(run("ReduceSum") == std::vector<double>(8, 0.0));
  CHECK(run("ReduceProd") == std::vector<double>(8, 1.0));
  CHECK(run("ReduceMax") == std::vector<double>(8, -kInf));
  CHECK(run("ReduceMin") == std::vector<double>(8, kInf));
  CHECK(run("ReduceLogSum") == std::vector<double>(8, -kInf));
  CHECK(run("ReduceLogSumExp") == std::vector<double>(8, -kInf));
  CHECK(std::isnan(run("ReduceMean")[0]));
  const Tensor ei = make_tensor<int32_t>({0, 3}, {});
  CHECK(values<int32_t>(OpTest("ReduceMax").input(ei).constant(make_tensor<int64_t>({1}, {0})).run1()) ==
        std::vector<int32_t>(3, std::numeric_limits<int32_t>::min()));
  // An empty output stays empty.
  CHECK(OpTest("ReduceSum").input(e).constant(make_tensor<int64_t>({1}, {2})).run1().shape() == Shape{2, 0, 1});
}

TEST_CASE("ReduceMax and ReduceMin on bool, ints, NaN", "[reduce]") {
  const Tensor b = make_tensor<bool>({2, 2}, {true, false, false, false});
  const Tensor ax = make_tensor<int64_t>({1}, {1});
  CHECK(values<bool>(OpTest("ReduceMax").input(b).constant(ax).run1()) == std::vector<bool>{true, false});
  CHECK(values<bool>(OpTest("ReduceMin").input(b).constant(ax).run1()) == std::vector<bool>{false, false});
  CHECK(values<bool>(OpTest("ReduceMin").input(make_tensor<bool>({1, 0}, {})).constant(ax).run1()) ==
        std::vector<bool>{true});
  CHECK(values<int8_t>(OpTest("ReduceSum").input(make_tensor<int8_t>({2}, {100, 100})).run1()) ==
        std::vector<int8_t>{-56});
  CHECK(values<int32_t>(OpTest("ReduceMean").input(make_tensor<int32_t>({3}, {1, 2, 2})).run1()) ==
        std::vector<int32_t>{1});
  const auto m = to_doubles(OpTest("ReduceMax").input(make_tensor_as(DType::F32, {3}, {1, kNaN, 3})).run1());
  CHECK(std::isnan(m[0]));
  CHECK(all_close(to_doubles(OpTest("ReduceLogSumExp").input(make_tensor<float>({2}, {1000, 1000})).run1()),
                  {1000 + std::log(2.0)}));
}

TEST_CASE("reductions validate axes", "[reduce]") {
  CHECK_THROWS_WITH(reduce("ReduceSum", {3}).run(), Catch::Contains("3") && Catch::Contains("rank 3"));
  CHECK_THROWS_WITH(reduce("ReduceSum", {1, -2}).run(), Catch::Contains("twice"));
}

TEST_CASE("ReduceMean over the last axis matches a double reference on large rows", "[reduce]") {
  const int64_t rows = 64, cols = 1000;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = dist(rng);
  const Tensor y = OpTest("ReduceMean").threads(2).attr("keepdims", int64_t{1}).input(make_tensor<float>({rows, cols}, x))
                       .constant(make_tensor<int64_t>({1}, {-1})).run1();
  CHECK(y.shape() == Shape{rows, 1});
  std::vector<double> want(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[static_cast<size_t>(r * cols + c)];
    want[static_cast<size_t>(r)] = s / cols;
  }
  CHECK(all_close(to_doubles(y), want, 1e-5, 1e-6));
}

TEST_CASE("ArgMax and ArgMin", "[reduce][arg]") {
  const Tensor x = make_tensor<float>({2, 3}, {1, 5, 5, 7, 2, 7});
  CHECK(values<int64_t>(OpTest("ArgMax").attr("axis", int64_t{1}).input(x).run1()) == std::vector<int64_t>{1, 0});
  CHECK(values<int64_t>(OpTest("ArgMax").attr("axis", int64_t{-1}).attr("select_last_index", int64_t{1}).input(x)
                            .run1()) == std::vector<int64_t>{2, 2});
  const Tensor y = OpTest("ArgMin").attr("keepdims", int64_t{0}).input(x).run1();
  CHECK(y.shape() == Shape{3});
  CHECK(values<int64_t>(y) == std::vector<int64_t>{0, 1, 0});
  CHECK(OpTest("ArgMax").input(x).run1().shape() == Shape{1, 3});
  CHECK(values<int64_t>(OpTest("ArgMax").input(make_tensor_as(DType::F32, {3}, {1, kNaN, 9})).run1()) ==
        std::vector<int64_t>{1});
  CHECK_THROWS_WITH(OpTest("ArgMax").attr("axis", int64_t{2}).input(x).run(), Catch::Contains("axis"));
  CHECK_THROWS_WITH(OpTest("ArgMax").attr("axis", int64_t{1}).input(make_tensor<float>({2, 0}, {})).run(),
                    Catch::Contains("empty"));
}
