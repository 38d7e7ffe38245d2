#include <catch2/catch.hpp>

#include <bit>
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

Tensor f32(Shape s, const std::vector<double>& v) { return make_tensor_as(DType::F32, std::move(s), v); }
Tensor scalar_f32(float v) { return make_tensor<float>({}, {v}); }
}  // namespace

TEST_CASE("Q/DQ are registered for opsets 17-21 and com.microsoft", "[quantize]") {
  for (int64_t v = 17; v <= 21; ++v) {
    CHECK(default_op_registry().find("", "QuantizeLinear", v) != nullptr);
    CHECK(default_op_registry().find("", "DequantizeLinear", v) != nullptr);
    CHECK(default_op_registry().find("", "DynamicQuantizeLinear", v) != nullptr);
  }
  CHECK(default_op_registry().find(kMicrosoftDomain, "QuantizeLinear", 1) != nullptr);
  CHECK(default_op_registry().find(kMicrosoftDomain, "DequantizeLinear", 1) != nullptr);
}

TEST_CASE("QuantizeLinear rounds ties to even, then adds the zero point", "[quantize]") {
  const Tensor x = f32({8}, {2.5, 3.5, -2.5, 0.5, 1.5, -0.5, -3.5, 2.4999});
  const Tensor q = OpTest("QuantizeLinear").input(x).input(scalar_f32(1)).input(make_tensor<int8_t>({}, {0})).run1();
  CHECK(values<int8_t>(q) == std::vector<int8_t>{2, 4, -2, 0, 2, 0, -4, 2});
  // zp added after rounding: 0.5 -> 0, + 1 = 1 (rounding 0.5 + 1 would give 2).
  const Tensor u = OpTest("QuantizeLinear").input(x).input(scalar_f32(1)).input(make_tensor<uint8_t>({}, {11})).run1();
  CHECK(values<uint8_t>(u) == std::vector<uint8_t>{13, 15, 9, 11, 13, 11, 7, 13});
  // Ties after dividing by the scale: 5 / 2 = 2.5 -> 2, 7 / 2 = 3.5 -> 4.
  const Tensor d = OpTest("QuantizeLinear").input(f32({2}, {5, 7})).input(scalar_f32(2)).run1();
  CHECK(d.dtype() == DType::U8);
  CHECK(values<uint8_t>(d) == std::vector<uint8_t>{2, 4});
}

TEST_CASE("QuantizeLinear divides by the scale, it does not multiply by its reciprocal", "[quantize]") {
  // x / s is exactly 126.5 in float32 (-> 126), x * (1 / s) rounds to 126.50001 (-> 127).
  const float x = std::bit_cast<float>(1056044339u), s = std::bit_cast<float>(997512110u);
  REQUIRE(x / s == 126.5f);
  REQUIRE(std::nearbyint(x * (1.0f / s)) == 127.0f);
  const Tensor q = OpTest("QuantizeLinear").input(make_tensor<float>({1}, {x})).input(scalar_f32(s)).run1();
  CHECK(values<uint8_t>(q) == std::vector<uint8_t>{126});
}

TEST_CASE("QuantizeLinear saturates to every output type", "[quantize]") {
  const Tensor x = f32({6}, {1000, -1000, 127.5, -128.5, kInf, kNaN});
  auto quant = [&](DType t, double zp = 0) {
    return to_doubles(OpTest("QuantizeLinear").input(x).input(scalar_f32(1)).input(make_tensor_as(t, {}, {zp})).run1());
  };
  CHECK(quant(DType::I8) == std::vector<double>{127, -128, 127, -128, 127, -128});
  CHECK(quant(DType::U8) == std::vector<double>{255, 0, 128, 0, 255, 0});
  CHECK(quant(DType::I16) == std::vector<double>{1000, -1000, 128, -128, 32767, -32768});
  CHECK(quant(DType::U16, 1000) == std::vector<double>{2000, 0, 1128, 872, 65535, 0});
  CHECK(quant(DType::I4) == std::vector<double>{7, -8, 7, -8, 7, -8});
  CHECK(quant(DType::U4, 3) == std::vector<double>{15, 0, 15, 0, 15, 0});
}

TEST_CASE("QuantizeLinear output type from output_dtype or the zero point", "[quantize]") {
  const Tensor x = f32({3}, {-1, 0, 1});
  CHECK(OpTest("QuantizeLinear").input(x).input(scalar_f32(1)).run1().dtype() == DType::U8);
  const Tensor i8 = OpTest("QuantizeLinear").attr("output_dtype", int64_t{3}).input(x).input(scalar_f32(1)).run1();
  CHECK(values<int8_t>(i8) == std::vector<int8_t>{-1, 0, 1});
  const Tensor i4 = OpTest("QuantizeLinear").attr("output_dtype", int64_t{22}).input(x).input(scalar_f32(1)).run1();
  CHECK(i4.dtype() == DType::I4);
  CHECK(to_doubles(i4) == std::vector<double>{-1, 0, 1});
  CHECK_THROWS_WITH(OpTest("QuantizeLinear").attr("output_dtype", int64_t{3}).input(x).input(scalar_f32(1))
                        .input(make_tensor<uint8_t>({}, {0})).run(),
                    Catch::Contains("output_dtype") && Catch::Contains("uint8"));
  CHECK_THROWS_WITH(OpTest("QuantizeLinear").attr("output_dtype", int64_t{17}).input(x).input(scalar_f32(1)).run(),
                    Catch::Contains("float8"));
  CHECK_THROWS_WITH(OpTest("QuantizeLinear", 19).attr("block_size", int64_t{2}).input(x).input(scalar_f32(1)).run(),
                    Catch::Contains("block_size") && Catch::Contains("21"));
}

TEST_CASE("QuantizeLinear per axis, negative axis", "[quantize]") {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor s = make_tensor<float>({3}, {1, 2, 4});
  const Tensor z = make_tensor<int8_t>({3}, {0, 10, -10});
  const Tensor q = OpTest("QuantizeLinear").attr("axis", int64_t{-1}).input(x).input(s).input(z).run1();
  CHECK(values<int8_t>(q) == std::vector<int8_t>{1, 11, -9, 4, 12, -8});  // 3/4 = 0.75 -> 1, 6/4 = 1.5 -> 2
  const Tensor q0 = OpTest("QuantizeLinear").attr("axis", int64_t{0}).input(x).input(make_tensor<float>({2}, {1, 2}))
                        .run1();
  CHECK(values<uint8_t>(q0) == std::vector<uint8_t>{1, 2, 3, 2, 2, 3});  // 5/2 = 2.5 -> 2
  CHECK_THROWS_WITH(OpTest("QuantizeLinear").input(x).input(make_tensor<float>({2}, {1, 2})).run(),
                    Catch::Contains("scale") && Catch::Contains("[3]"));
}

TEST_CASE("Blocked quantization with a partial last block", "[quantize][blocked]") {
  // x [2, 5], block 2 along axis 1: scale [2, 3], the last block holds one column.
  const Tensor x = f32({2, 5}, {1, 2, 3, 4, 5, -1, -2, -3, -4, -5});
  const Tensor s = make_tensor<float>({2, 3}, {1, 2, 4, 1, 0.5f, 2});
  const Tensor z = make_tensor<int8_t>({2, 3}, {0, 1, -1, 0, 0, 3});
  const Tensor q = OpTest("QuantizeLinear").attr("axis", int64_t{1}).attr("block_size", int64_t{2}).input(x).input(s)
                       .input(z).run1();
  // Row 0: 1/1, 2/1, 3/2=1.5->2 +1, 4/2=2 +1, 5/4=1.25->1 -1. Row 1: -1, -2, -6, -8, -5/2=-2.5->-2 +3.
  CHECK(values<int8_t>(q) == std::vector<int8_t>{1, 2, 3, 3, 0, -1, -2, -6, -8, 1});
  const Tensor y = OpTest("DequantizeLinear").attr("axis", int64_t{1}).attr("block_size", int64_t{2}).input(q).input(s)
                       .input(z).run1();
  CHECK(values<float>(y) == std::vector<float>{1, 2, 4, 4, 4, -1, -2, -3, -4, -4});
  // Along axis 0 with inner > 1.
  const Tensor x3 = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor q3 = OpTest("QuantizeLinear").attr("axis", int64_t{0}).attr("block_size", int64_t{2}).input(x3)
                        .input(make_tensor<float>({2, 2}, {1, 2, 4, 8})).run1();
  CHECK(values<uint8_t>(q3) == std::vector<uint8_t>{1, 1, 3, 2, 1, 1});  // 5/4 = 1.25, 6/8 = 0.75
  CHECK_THROWS_WITH(OpTest("QuantizeLinear").attr("axis", int64_t{1}).attr("block_size", int64_t{2}).input(x)
                        .input(make_tensor<float>({2, 2}, {1, 1, 1, 1})).run(),
                    Catch::Contains("block_size 2") && Catch::Contains("[2,3]"));
}

TEST_CASE("int4 quantization packs odd counts, low nibble first", "[quantize][int4]") {
  const Tensor x = f32({5}, {-9, -1, 0, 3.5, 100});
  const Tensor q = OpTest("QuantizeLinear").input(x).input(scalar_f32(1)).input(make_tensor_as(DType::I4, {}, {0})).run1();
  REQUIRE(q.bytes() == 3);
  CHECK(to_doubles(q) == std::vector<double>{-8, -1, 0, 4, 7});
  CHECK(q.data<uint8_t>()[0] == 0xF8);
  CHECK(q.data<uint8_t>()[1] == 0x40);
  CHECK(q.data<uint8_t>()[2] == 0x07);  // the unused high nibble is 0
  // Per axis on an odd inner dimension (serial path), uint4 with zero point 8.
  const Tensor x2 = f32({2, 3}, {0, 1, -1, 2, -2, 20});
  const Tensor q2 = OpTest("QuantizeLinear").attr("axis", int64_t{0}).input(x2).input(make_tensor<float>({2}, {1, 2}))
                        .input(make_tensor_as(DType::U4, {2}, {8, 8})).run1();
  CHECK(to_doubles(q2) == std::vector<double>{8, 9, 7, 9, 7, 15});
  const Tensor back = OpTest("DequantizeLinear").attr("axis", int64_t{0}).input(q2).input(make_tensor<float>({2}, {1, 2}))
                          .input(make_tensor_as(DType::U4, {2}, {8, 8})).run1();
  CHECK(values<float>(back) == std::vector<float>{0, 1, -1, 2, -2, 14});
}

TEST_CASE("DequantizeLinear per tensor, per axis, types", "[quantize][dequantize]") {
  const Tensor q = make_tensor<uint8_t>({4}, {0, 3, 128, 255});
  CHECK(values<float>(OpTest("DequantizeLinear").input(q).input(scalar_f32(2)).input(make_tensor<uint8_t>({}, {128}))
                          .run1()) == std::vector<float>{-256, -250, 0, 254});
  CHECK(values<float>(OpTest("DequantizeLinear").input(q).input(scalar_f32(0.5f)).run1()) ==
        std::vector<float>{0, 1.5f, 64, 127.5f});
  const Tensor i8 = make_tensor<int8_t>({2, 2}, {-128, 127, 1, -1});
  CHECK(values<float>(OpTest("DequantizeLinear").attr("axis", int64_t{-1}).input(i8)
                          .input(make_tensor<float>({2}, {1, 10})).input(make_tensor<int8_t>({2}, {0, -1})).run1()) ==
        std::vector<float>{-128, 1280, 1, 0});
  const Tensor i32 = make_tensor<int32_t>({2}, {-2147483647 - 1, 2147483647});
  CHECK(values<float>(OpTest("DequantizeLinear").input(i32).input(scalar_f32(1)).run1()) ==
        std::vector<float>{-2147483648.0f, 2147483648.0f});
  const Tensor i16 = make_tensor<int16_t>({2}, {-32768, 32767});
  CHECK(values<float>(OpTest("DequantizeLinear").input(i16).input(scalar_f32(1)).input(make_tensor<int16_t>({}, {-1}))
                          .run1()) == std::vector<float>{-32767, 32768});
  // A scalar scale with a one-element zero point is still per tensor.
  CHECK(values<float>(OpTest("DequantizeLinear").input(q).input(scalar_f32(1)).input(make_tensor<uint8_t>({1}, {3}))
                          .run1()) == std::vector<float>{-3, 0, 125, 252});
  CHECK_THROWS_WITH(OpTest("DequantizeLinear").input(q).input(scalar_f32(1)).input(make_tensor<uint8_t>({2}, {3, 3}))
                        .run(),
                    Catch::Contains("zero point") && Catch::Contains("[2]"));
  CHECK_THROWS_WITH(OpTest("DequantizeLinear").input(q).input(scalar_f32(1)).input(make_tensor<int8_t>({}, {0})).run(),
                    Catch::Contains("int8") && Catch::Contains("uint8"));
}

TEST_CASE("DequantizeLinear with an f16 or bf16 scale gives that type", "[quantize][dequantize]") {
  const Tensor q = make_tensor<int8_t>({3}, {-3, 0, 100});
  const Tensor h = OpTest("DequantizeLinear").input(q).input(make_tensor_as(DType::F16, {}, {0.5})).run1();
  CHECK(h.dtype() == DType::F16);
  CHECK(to_doubles(h) == std::vector<double>{-1.5, 0, 50});
  const Tensor b = OpTest("DequantizeLinear").input(q).input(make_tensor_as(DType::BF16, {}, {0.1})).run1();
  CHECK(b.dtype() == DType::BF16);
  CHECK(to_doubles(b)[2] == static_cast<double>(bfloat16_to_float(float_to_bfloat16(
                                100.0f * bfloat16_to_float(float_to_bfloat16(0.1f))))));
  // f16 x with an f16 scale: the division is float32, on the widened values.
  const Tensor qh = OpTest("QuantizeLinear").input(make_tensor_as(DType::F16, {2}, {5, -7}))
                        .input(make_tensor_as(DType::F16, {}, {2})).input(make_tensor<int8_t>({}, {0})).run1();
  CHECK(values<int8_t>(qh) == std::vector<int8_t>{2, -4});
}

TEST_CASE("com.microsoft Q/DQ match ai.onnx", "[quantize]") {
  const Tensor x = f32({2, 2}, {0.25, -1.5, 2.5, 300});
  const Tensor s = make_tensor<float>({2}, {0.5f, 1});
  const Tensor z = make_tensor<uint16_t>({2}, {10, 65530});
  const Tensor a = OpTest("QuantizeLinear").input(x).input(s).input(z).run1();
  const Tensor m = OpTest("QuantizeLinear", 1, kMicrosoftDomain).input(x).input(s).input(z).run1();
  CHECK(values<uint16_t>(a) == values<uint16_t>(m));
  CHECK(values<uint16_t>(a) == std::vector<uint16_t>{10, 65528, 15, 65535});
  const Tensor d = OpTest("DequantizeLinear", 1, kMicrosoftDomain).input(a).input(s).input(z).run1();
  CHECK(values<float>(d) == std::vector<float>{0, -2, 2.5f, 5});
}

TEST_CASE("Q/DQ on large and empty tensors", "[quantize]") {
  std::vector<float> v(100001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 301) - 150) * 0.5f;
  const Tensor q = OpTest("QuantizeLinear").threads(2).input(make_tensor<float>({100001}, v)).input(scalar_f32(0.5f))
                       .input(make_tensor_as(DType::I4, {}, {0})).run1();
  const auto d = to_doubles(q);
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) ok &= d[i] == std::clamp(std::nearbyint(v[i] / 0.5f), -8.0f, 7.0f);
  CHECK(ok);
  CHECK(OpTest("QuantizeLinear").input(make_tensor<float>({0, 4}, {})).input(scalar_f32(1)).run1().shape() == Shape{0, 4});
  CHECK(OpTest("DequantizeLinear").input(make_tensor<int8_t>({3, 0}, {})).input(scalar_f32(1)).run1().shape() ==
        Shape{3, 0});
}

TEST_CASE("DynamicQuantizeLinear", "[quantize][dynamic]") {
  // The ONNX example: range [-3, 2], scale 5/255, zero point 153.
  const auto out = OpTest("DynamicQuantizeLinear", 21).outputs(3).input(f32({6}, {0, 2, -3, -2.5, 1.34, 0.5})).run();
  CHECK(values<uint8_t>(out[0]) == std::vector<uint8_t>{153, 255, 0, 26, 221, 179});
  CHECK(values<float>(out[1])[0] == 5.0f / 255.0f);
  CHECK(values<uint8_t>(out[2]) == std::vector<uint8_t>{153});
  // All zeros: scale 1/255, zero point 0.
  const auto z = OpTest("DynamicQuantizeLinear", 21).outputs(3).input(f32({2}, {0, 0})).run();
  CHECK(values<float>(z[1])[0] == 1.0f / 255.0f);
  CHECK(values<uint8_t>(z[0]) == std::vector<uint8_t>{0, 0});
}
