#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "graph/op_registry.h"
#include "ops/register_ops.h"

using namespace onebit;
using namespace onebit::test;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor cast(const Tensor& x, DType to, int64_t opset = 21) {
  return OpTest("Cast", opset).attr("to", static_cast<int64_t>(to)).input(x).run1();
}
}  // namespace

TEST_CASE("Cast and CastLike are registered for opsets 17-21", "[cast]") {
  for (int64_t v = 17; v <= 21; ++v) {
    CHECK(default_op_registry().find("", "Cast", v) != nullptr);
    CHECK(default_op_registry().find("", "CastLike", v) != nullptr);
  }
}

TEST_CASE("Cast float to integers truncates toward zero", "[cast]") {
  const Tensor x = make_tensor_as(DType::F32, {6}, {2.9, -2.9, 0.5, -0.5, 127, -128});
  CHECK(values<int8_t>(cast(x, DType::I8)) == std::vector<int8_t>{2, -2, 0, 0, 127, -128});
  CHECK(values<int64_t>(cast(x, DType::I64)) == std::vector<int64_t>{2, -2, 0, 0, 127, -128});
  const Tensor d = make_tensor<double>({2}, {4294967295.0, 1e15});
  CHECK(values<uint32_t>(cast(d, DType::U32)) == std::vector<uint32_t>{4294967295u, 2764472320u});
  CHECK(values<int64_t>(cast(d, DType::I64)) == std::vector<int64_t>{4294967295LL, 1000000000000000LL});
}

TEST_CASE("Cast float out of range and NaN follow x86 cvtt", "[cast]") {
  const Tensor x = make_tensor_as(DType::F32, {4}, {kNaN, 3e9, 300, -1});
  CHECK(values<int32_t>(cast(x, DType::I32)) ==
        std::vector<int32_t>{INT32_MIN, INT32_MIN, 300, -1});
  CHECK(values<uint8_t>(cast(x, DType::U8)) == std::vector<uint8_t>{0, 0, 44, 255});
  CHECK(values<uint64_t>(cast(x, DType::U64)) ==
        std::vector<uint64_t>{uint64_t{1} << 63, 3000000000u, 300, ~uint64_t{0}});
  CHECK(values<uint64_t>(cast(make_tensor<double>({1}, {1.5e19}), DType::U64)) ==
        std::vector<uint64_t>{15000000000000000000ull});
}

TEST_CASE("Cast between integers keeps the low bits", "[cast]") {
  CHECK(values<int8_t>(cast(make_tensor<int16_t>({3}, {200, -129, 256}), DType::I8)) ==
        std::vector<int8_t>{-56, 127, 0});
  CHECK(values<uint16_t>(cast(make_tensor<int64_t>({2}, {-1, 65537}), DType::U16)) ==
        std::vector<uint16_t>{65535, 1});
  CHECK(values<int64_t>(cast(make_tensor<uint32_t>({1}, {4294967295u}), DType::I64)) ==
        std::vector<int64_t>{4294967295LL});
}

TEST_CASE("Cast to and from bool", "[cast]") {
  const Tensor x = make_tensor_as(DType::F32, {5}, {0, -0.0, kNaN, 0.5, -kInf});
  CHECK(values<bool>(cast(x, DType::Bool)) == std::vector<bool>{false, false, true, true, true});
  CHECK(values<bool>(cast(make_tensor<int32_t>({3}, {0, 36, -1}), DType::Bool)) == std::vector<bool>{false, true, true});
  CHECK(values<float>(cast(make_tensor<bool>({2}, {true, false}), DType::F32)) == std::vector<float>{1, 0});
  CHECK(to_doubles(cast(make_tensor<bool>({2}, {true, false}), DType::BF16)) == std::vector<double>{1, 0});
}

TEST_CASE("Cast between float widths rounds to nearest even, once", "[cast]") {
  // 1 + 2^-11 + 2^-40: just above the f16 tie between 1 and 1 + 2^-10. Via
  // float32 it would land on the tie and round down to 1.
  const Tensor d = make_tensor<double>({3}, {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1e6, -1e300});
  CHECK(to_doubles(cast(d, DType::F16)) == std::vector<double>{1.0 + std::ldexp(1.0, -10), kInf, -kInf});
  const Tensor f = make_tensor_as(DType::F32, {3}, {1.0 + std::ldexp(1.0, -11), 65520, kNaN});
  const auto h = to_doubles(cast(f, DType::F16));
  CHECK(h[0] == 1.0);
  CHECK(h[1] == kInf);
  CHECK(std::isnan(h[2]));
  const auto b = to_doubles(cast(make_tensor<float>({2}, {1.00390625f, 1.01171875f}), DType::BF16));
  CHECK(b == std::vector<double>{1.0, 1.015625});
  CHECK(values<double>(cast(make_tensor_as(DType::F16, {1}, {0.1}), DType::F64))[0] ==
        static_cast<double>(half_to_float(float_to_half(0.1f))));
  CHECK(to_doubles(cast(make_tensor<int32_t>({2}, {16777217, -3}), DType::BF16)) == std::vector<double>{16777216, -3});
}

TEST_CASE("Cast to int4/uint4 keeps the low nibble and packs low first", "[cast][int4]") {
  std::vector<double> in;
  for (int v = -9; v <= 10; ++v) in.push_back(v);
  const Tensor y = cast(make_tensor_as(DType::F32, {20}, in), DType::I4);
  CHECK(y.dtype() == DType::I4);
  CHECK(to_doubles(y) == std::vector<double>{7, -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6});
  const Tensor u = cast(make_tensor_as(DType::F32, {20}, in), DType::U4);
  CHECK(to_doubles(u) == std::vector<double>{7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  // Odd count: 3 elements in 2 bytes, the unused high nibble zero.
  const Tensor odd = cast(make_tensor<int32_t>({3}, {1, -2, 3}), DType::I4);
  REQUIRE(odd.bytes() == 2);
  CHECK(odd.data<uint8_t>()[0] == 0xE1);
  CHECK(odd.data<uint8_t>()[1] == 0x03);
}

TEST_CASE("Cast from int4/uint4", "[cast][int4]") {
  const Tensor i4 = make_tensor_as(DType::I4, {5}, {-8, -1, 0, 7, 3});
  CHECK(values<float>(cast(i4, DType::F32)) == std::vector<float>{-8, -1, 0, 7, 3});
  CHECK(values<int8_t>(cast(i4, DType::I8)) == std::vector<int8_t>{-8, -1, 0, 7, 3});
  CHECK(to_doubles(cast(i4, DType::U4)) == std::vector<double>{8, 15, 0, 7, 3});
  const Tensor u4 = make_tensor_as(DType::U4, {3}, {15, 0, 8});
  CHECK(values<uint8_t>(cast(u4, DType::U8)) == std::vector<uint8_t>{15, 0, 8});
  CHECK(to_doubles(cast(u4, DType::F16)) == std::vector<double>{15, 0, 8});
}

TEST_CASE("Cast to the same type and CastLike", "[cast]") {
  const Tensor x = make_tensor<float>({2, 2}, {1.5f, -2.5f, 3, 4});
  CHECK(values<float>(cast(x, DType::F32)) == values<float>(x));
  const Tensor y = OpTest("CastLike").input(x).input(make_tensor<int16_t>({0}, {})).run1();
  CHECK(y.shape() == Shape{2, 2});
  CHECK(values<int16_t>(y) == std::vector<int16_t>{1, -2, 3, 4});
  CHECK(cast(make_tensor<float>({0, 3}, {}), DType::I4).shape() == Shape{0, 3});
}

TEST_CASE("Cast refuses float8 and strings with the attribute named", "[cast]") {
  CHECK_THROWS_WITH(OpTest("Cast").attr("to", int64_t{17}).input(make_tensor<float>({1}, {1})).run(),
                    Catch::Contains("'to'") && Catch::Contains("float8e4m3fn"));
  CHECK_THROWS_WITH(OpTest("Cast").attr("to", int64_t{8}).input(make_tensor<float>({1}, {1})).run(),
                    Catch::Contains("string"));
  CHECK_THROWS_WITH(OpTest("Cast").input(make_tensor<float>({1}, {1})).run(), Catch::Contains("'to'"));
}

TEST_CASE("Cast of a large tensor in parallel", "[cast]") {
  std::vector<float> v(200001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f - 1000.0f;
  const auto y = values<int32_t>(OpTest("Cast").threads(2).attr("to", int64_t{6}).input(make_tensor<float>({200001}, v)).run1());
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) ok &= y[i] == static_cast<int32_t>(v[i]);
  CHECK(ok);
  const Tensor n4 = OpTest("Cast").threads(2).attr("to", int64_t{22}).input(make_tensor<float>({200001}, v)).run1();
  const auto d = to_doubles(n4);
  ok = true;
  for (size_t i = 0; i < v.size(); ++i) ok &= d[i] == static_cast<double>(((static_cast<int32_t>(v[i]) & 15) ^ 8) - 8);
  CHECK(ok);
}
