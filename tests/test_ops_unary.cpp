#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "op_test_util.h"
#include "graph/op_registry.h"
#include "ops/register_ops.h"

using namespace onebit;
using namespace onebit::test;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<double> run_f32(const char* op, const std::vector<double>& x) {
  return to_doubles(OpTest(op).input(make_tensor_as(DType::F32, {static_cast<int64_t>(x.size())}, x)).run1());
}
}  // namespace

TEST_CASE("unary ops are registered for every opset 17-21", "[unary]") {
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
                         "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Sigmoid", "Relu", "Erf", "Floor", "Ceil",
                         "Round", "Sign", "Not", "BitwiseNot", "IsNaN", "IsInf", "Identity"})
    for (int64_t v = std::string(op) == "BitwiseNot" ? 18 : 17; v <= 21; ++v) {  // BitwiseNot is new in 18
      INFO(op << " opset " << v);
      CHECK(default_op_registry().find("", op, v) != nullptr);
    }
}

TEST_CASE("Round rounds halves to even", "[unary]") {
  const auto y = run_f32("Round", {2.5, 3.5, -2.5, -4.5, 0.5, 1.5, 0.9, 2.3, -0.0, kNaN, kInf, -kInf, 0x1p70});
  CHECK(all_close(y, {2, 4, -2, -4, 0, 2, 1, 2, -0.0, kNaN, kInf, -kInf, 0x1p70}, 0, 0));
  const Tensor h = OpTest("Round").input(make_tensor_as(DType::F16, {3}, {0.5, 1.5, -2.5})).run1();
  CHECK(h.dtype() == DType::F16);
  CHECK(to_doubles(h) == std::vector<double>{0, 2, -2});
}

TEST_CASE("Abs, Neg and Sign on integers wrap like two's complement", "[unary]") {
  const Tensor x = make_tensor<int8_t>({4}, {-128, -5, 0, 127});
  CHECK(values<int8_t>(OpTest("Abs").input(x).run1()) == std::vector<int8_t>{-128, 5, 0, 127});
  CHECK(values<int8_t>(OpTest("Neg").input(x).run1()) == std::vector<int8_t>{-128, 5, 0, -127});
  CHECK(values<int8_t>(OpTest("Sign").input(x).run1()) == std::vector<int8_t>{-1, -1, 0, 1});
  const Tensor big = make_tensor<int64_t>({2}, {std::numeric_limits<int64_t>::min(), -3});
  CHECK(values<int64_t>(OpTest("Abs").input(big).run1()) ==
        std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 3});
  CHECK(values<uint16_t>(OpTest("Sign").input(make_tensor<uint16_t>({2}, {0, 9})).run1()) ==
        std::vector<uint16_t>{0, 1});
}

TEST_CASE("float unary ops at their edges", "[unary]") {
  CHECK(all_close(run_f32("Log", {0, -1, 1, kInf}), {-kInf, kNaN, 0, kInf}));
  CHECK(all_close(run_f32("Sqrt", {-1, 0, 4}), {kNaN, 0, 2}));
  CHECK(all_close(run_f32("Reciprocal", {0, -0.0, 4}), {kInf, -kInf, 0.25}));
  CHECK(all_close(run_f32("Exp", {-kInf, 0, 1}), {0, 1, std::exp(1.0)}));
  CHECK(all_close(run_f32("Sigmoid", {-1000, 0, 1000, 2}), {0, 0.5, 1, 1 / (1 + std::exp(-2.0))}));
  CHECK(all_close(run_f32("Relu", {-1, 0, 3, kNaN}), {0, 0, 3, kNaN}));
  CHECK(all_close(run_f32("Sign", {-2, 0, 5, kNaN}), {-1, 0, 1, kNaN}));
  CHECK(all_close(run_f32("Floor", {-1.5, 1.5}), {-2, 1}));
  CHECK(all_close(run_f32("Ceil", {-1.5, 1.5}), {-1, 2}));
  CHECK(all_close(run_f32("Atanh", {1, -1, 0.5}), {kInf, -kInf, std::atanh(0.5)}));
  CHECK(all_close(run_f32("Acosh", {0.5, 1}), {kNaN, 0}));
  CHECK(all_close(run_f32("Erf", {0, 1, -kInf}), {0, std::erf(1.0), -1}));
  CHECK(all_close(run_f32("Tanh", {-50, 0.5}), {-1, std::tanh(0.5)}));
}

TEST_CASE("unary ops keep f64 precision and round f16/bf16 once", "[unary]") {
  const Tensor d = OpTest("Exp").input(make_tensor<double>({1}, {1.0})).run1();
  CHECK(values<double>(d)[0] == std::exp(1.0));
  const Tensor b = OpTest("Sqrt").input(make_tensor_as(DType::BF16, {2}, {4, 2})).run1();
  CHECK(b.dtype() == DType::BF16);
  CHECK(to_doubles(b)[0] == 2);
  CHECK(to_doubles(b)[1] == bfloat16_to_float(float_to_bfloat16(std::sqrt(2.0f))));
}

TEST_CASE("IsNaN and IsInf with detect_negative / detect_positive", "[unary]") {
  const Tensor x = make_tensor_as(DType::F32, {5}, {kNaN, kInf, -kInf, 0, 1});
  CHECK(values<bool>(OpTest("IsNaN").input(x).run1()) == std::vector<bool>{true, false, false, false, false});
  CHECK(values<bool>(OpTest("IsInf").input(x).run1()) == std::vector<bool>{false, true, true, false, false});
  CHECK(values<bool>(OpTest("IsInf").attr("detect_negative", 0).input(x).run1()) ==
        std::vector<bool>{false, true, false, false, false});
  CHECK(values<bool>(OpTest("IsInf").attr("detect_positive", 0).input(x).run1()) ==
        std::vector<bool>{false, false, true, false, false});
  const Tensor h = make_tensor_as(DType::F16, {2}, {kInf, kNaN});
  CHECK(values<bool>(OpTest("IsNaN").input(h).run1()) == std::vector<bool>{false, true});
}

TEST_CASE("Not and BitwiseNot", "[unary]") {
  CHECK(values<bool>(OpTest("Not").input(make_tensor<bool>({3}, {true, false, true})).run1()) ==
        std::vector<bool>{false, true, false});
  CHECK(values<uint8_t>(OpTest("BitwiseNot").input(make_tensor<uint8_t>({2}, {0, 0x0F})).run1()) ==
        std::vector<uint8_t>{0xFF, 0xF0});
  CHECK(values<int32_t>(OpTest("BitwiseNot").input(make_tensor<int32_t>({2}, {0, -1})).run1()) ==
        std::vector<int32_t>{-1, 0});
}

TEST_CASE("unary ops reject types outside their constraint", "[unary]") {
  CHECK_THROWS_WITH(OpTest("Exp").input(make_tensor<int32_t>({1}, {1})).run(),
                    Catch::Contains("Exp") && Catch::Contains("int32"));
  CHECK_THROWS_WITH(OpTest("Not").input(make_tensor<float>({1}, {1})).run(), Catch::Contains("float32"));
}

TEST_CASE("unary ops on empty tensors and large threaded tensors", "[unary]") {
  const Tensor e = OpTest("Exp").input(make_tensor<float>({2, 0, 3}, {})).run1();
  CHECK(e.shape() == Shape{2, 0, 3});
  std::vector<float> big(100000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 97) - 48.5f;
  const auto y = values<float>(OpTest("Neg").threads(2).input(make_tensor<float>({100000}, big)).run1());
  bool ok = true;
  for (size_t i = 0; i < big.size(); ++i) ok &= y[i] == -big[i];
  CHECK(ok);
}

TEST_CASE("Identity copies any dtype, 4-bit included", "[unary]") {
  const Tensor x = make_tensor_as(DType::I4, {3}, {-8, 7, 3});
  const Tensor y = OpTest("Identity").input(x).run1();
  CHECK(y.dtype() == DType::I4);
  CHECK(to_doubles(y) == std::vector<double>{-8, 7, 3});
  const Tensor c = OpTest("Identity").constant(make_tensor<int64_t>({2}, {5, 6})).run1();
  CHECK(values<int64_t>(c) == std::vector<int64_t>{5, 6});
}

