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

Tensor f32(const std::vector<double>& x) { return make_tensor_as(DType::F32, {static_cast<int64_t>(x.size())}, x); }
}  // namespace

TEST_CASE("activations are registered for every opset they exist at in 17-21", "[activation]") {
  for (const char* op : {"Elu", "Selu", "Celu", "LeakyRelu", "HardSigmoid", "HardSwish", "ThresholdedRelu", "Softplus",
                         "Softsign", "Mish", "Clip"})
    for (int64_t v = std::string(op) == "Mish" ? 18 : 17; v <= 21; ++v) {
      INFO(op << " opset " << v);
      CHECK(default_op_registry().find("", op, v) != nullptr);
    }
  CHECK(default_op_registry().find("", "Gelu", 20) != nullptr);
  CHECK(default_op_registry().find("", "Gelu", 21) != nullptr);
}

TEST_CASE("activation formulas on hand-computed values", "[activation]") {
  const Tensor x = f32({-2, -0.5, 0, 0.5, 3});
  auto run = [&](OpTest t) { return to_doubles(t.input(x).run1()); };
  const double e2 = std::exp(-2.0), e05 = std::exp(-0.5);
  CHECK(all_close(run(OpTest("Elu").attr("alpha", 2.0f)), {2 * (e2 - 1), 2 * (e05 - 1), 0, 0.5, 3}));
  const double sa = 1.67326319217681884765625, sg = 1.05070102214813232421875;
  CHECK(all_close(run(OpTest("Selu")), {sg * sa * (e2 - 1), sg * sa * (e05 - 1), 0, sg * 0.5, sg * 3}, 1e-6));
  CHECK(all_close(run(OpTest("Celu").attr("alpha", 2.0f)),
                  {2 * (std::exp(-1.0) - 1), 2 * (std::exp(-0.25) - 1), 0, 0.5, 3}, 1e-6));
  CHECK(all_close(run(OpTest("LeakyRelu").attr("alpha", 0.1f)), {-0.2, -0.05, 0, 0.5, 3}, 1e-6));
  CHECK(all_close(run(OpTest("HardSigmoid")), {0.1, 0.4, 0.5, 0.6, 1}, 1e-6));
  CHECK(all_close(run(OpTest("HardSwish")), {-2 * (1 / 6.0), -0.5 * (5 / 12.0), 0, 0.5 * (7 / 12.0), 3}, 1e-6));
  CHECK(all_close(run(OpTest("ThresholdedRelu").attr("alpha", 0.5f)), {0, 0, 0, 0, 3}));
  CHECK(all_close(run(OpTest("Softsign")), {-2 / 3.0, -0.5 / 1.5, 0, 0.5 / 1.5, 0.75}, 1e-6));
  auto sp = [](double v) { return std::log1p(std::exp(v)); };
  CHECK(all_close(run(OpTest("Softplus")), {sp(-2), sp(-0.5), sp(0), sp(0.5), sp(3)}, 1e-6));
  CHECK(all_close(run(OpTest("Mish")), {-2 * std::tanh(sp(-2)), -0.5 * std::tanh(sp(-0.5)), 0,
                                        0.5 * std::tanh(sp(0.5)), 3 * std::tanh(sp(3))}, 1e-6));
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  CHECK(all_close(run(OpTest("Gelu", 20)), {gelu(-2), gelu(-0.5), 0, gelu(0.5), gelu(3)}, 1e-6));
  auto gelu_tanh = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  CHECK(all_close(run(OpTest("Gelu", 20).attr("approximate", "tanh")),
                  {gelu_tanh(-2), gelu_tanh(-0.5), 0, gelu_tanh(0.5), gelu_tanh(3)}, 1e-6));
}

TEST_CASE("Softplus does not overflow and activations keep NaN", "[activation]") {
  CHECK(all_close(to_doubles(OpTest("Softplus").input(f32({1000, -1000, kNaN})).run1()), {1000, 0, kNaN}));
  CHECK(all_close(to_doubles(OpTest("Elu").input(f32({kNaN, -kInf})).run1()), {kNaN, -1}));
}

TEST_CASE("activation attributes are validated at create", "[activation]") {
  CHECK_THROWS_WITH(OpTest("Gelu", 20).attr("approximate", "erf").input(f32({1})).run(),
                    Catch::Contains("approximate") && Catch::Contains("erf"));
  CHECK_THROWS_WITH(OpTest("Celu").attr("alpha", 0.0f).input(f32({1})).run(), Catch::Contains("alpha"));
  CHECK_THROWS_WITH(OpTest("Elu").attr("alpha", int64_t{1}).input(f32({1})).run(),
                    Catch::Contains("alpha") && Catch::Contains("int"));
}

TEST_CASE("activations on f16 and f64", "[activation]") {
  const Tensor h = OpTest("LeakyRelu").input(make_tensor_as(DType::F16, {2}, {-2, 2})).run1();
  CHECK(h.dtype() == DType::F16);
  CHECK(to_doubles(h)[0] == static_cast<double>(half_to_float(float_to_half(-0.02f))));
  const Tensor d = OpTest("HardSigmoid").attr("alpha", 0.25f).input(make_tensor<double>({1}, {1.0})).run1();
  CHECK(values<double>(d)[0] == 0.75);
}

TEST_CASE("Clip with optional min and max", "[activation][clip]") {
  const Tensor x = f32({-3, -1, 0, 2, 5, kNaN});
  CHECK(all_close(to_doubles(OpTest("Clip").input(x).input(make_tensor<float>({}, {-1})).input(
                      make_tensor<float>({}, {2})).run1()),
                  {-1, -1, 0, 2, 2, kNaN}));
  CHECK(all_close(to_doubles(OpTest("Clip").input(x).omit().input(make_tensor<float>({}, {1})).run1()),
                  {-3, -1, 0, 1, 1, kNaN}));
  CHECK(all_close(to_doubles(OpTest("Clip").input(x).input(make_tensor<float>({1}, {0})).run1()),
                  {0, 0, 0, 2, 5, kNaN}));
  CHECK(all_close(to_doubles(OpTest("Clip").input(x).run1()), to_doubles(x)));
  // min > max: everything becomes max.
  CHECK(all_close(to_doubles(OpTest("Clip").input(f32({-5, 0, 5})).input(make_tensor<float>({}, {3})).input(
                      make_tensor<float>({}, {1})).run1()),
                  {1, 1, 1}));
}

TEST_CASE("Clip on integer types", "[activation][clip]") {
  const Tensor x = make_tensor<int8_t>({4}, {-128, -5, 5, 127});
  CHECK(values<int8_t>(OpTest("Clip").input(x).constant(make_tensor<int8_t>({}, {-6})).constant(
                           make_tensor<int8_t>({}, {6})).run1()) == std::vector<int8_t>{-6, -5, 5, 6});
  const Tensor u = make_tensor<uint64_t>({2}, {0, ~uint64_t{0}});
  CHECK(values<uint64_t>(OpTest("Clip").input(u).omit().input(make_tensor<uint64_t>({}, {7})).run1()) ==
        std::vector<uint64_t>{0, 7});
  CHECK_THROWS_WITH(OpTest("Clip").input(x).input(make_tensor<float>({}, {1})).run(),
                    Catch::Contains("min") && Catch::Contains("float32"));
  CHECK_THROWS_WITH(OpTest("Clip").input(x).input(make_tensor<int8_t>({2}, {1, 2})).run(),
                    Catch::Contains("scalar") && Catch::Contains("[2]"));
}
