#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "graph/op_registry.h"

using namespace onebit;
using namespace onebit::test;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}

TEST_CASE("Sum, Mean, Max, Min broadcast over any number of inputs", "[variadic]") {
  const Tensor a = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = make_tensor<float>({3}, {10, 20, 30});
  const Tensor c = make_tensor<float>({2, 1}, {100, 200});
  CHECK(values<float>(OpTest("Sum").input(a).input(b).input(c).run1()) ==
        std::vector<float>{111, 122, 133, 214, 225, 236});
  const Tensor m = OpTest("Mean").input(a).input(b).input(c).run1();
  CHECK(m.shape() == Shape{2, 3});
  CHECK(all_close(to_doubles(m), {111 / 3.0, 122 / 3.0, 133 / 3.0, 214 / 3.0, 225 / 3.0, 236 / 3.0}));
  CHECK(values<float>(OpTest("Max").input(a).input(make_tensor<float>({}, {3.5f})).run1()) ==
        std::vector<float>{3.5, 3.5, 3.5, 4, 5, 6});
  CHECK(values<float>(OpTest("Min").input(a).input(b).run1()) == std::vector<float>{1, 2, 3, 4, 5, 6});
  // A single input is copied.
  CHECK(values<float>(OpTest("Sum").input(a).run1()) == values<float>(a));
}

TEST_CASE("Max and Min on integers and with NaN", "[variadic]") {
  CHECK(values<int32_t>(OpTest("Max").input(make_tensor<int32_t>({3}, {-1, 5, 2})).input(
            make_tensor<int32_t>({3}, {0, 4, 2})).run1()) == std::vector<int32_t>{0, 5, 2});
  CHECK(values<uint8_t>(OpTest("Min").input(make_tensor<uint8_t>({2}, {200, 3})).input(
            make_tensor<uint8_t>({1}, {100})).run1()) == std::vector<uint8_t>{100, 3});
  const auto y = to_doubles(OpTest("Max").input(make_tensor_as(DType::F32, {2}, {kNaN, 1})).input(
      make_tensor_as(DType::F32, {2}, {0, kNaN})).run1());
  CHECK((std::isnan(y[0]) && std::isnan(y[1])));
}

TEST_CASE("variadic ops validate types and shapes", "[variadic]") {
  CHECK_THROWS_WITH(OpTest("Sum").input(make_tensor<float>({2}, {1, 2})).input(make_tensor<float>({3}, {1, 2, 3})).run(),
                    Catch::Contains("[2]") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(OpTest("Sum").input(make_tensor<float>({1}, {1})).input(make_tensor<double>({1}, {1})).run(),
                    Catch::Contains("float64"));
  CHECK_THROWS_WITH(OpTest("Mean").input(make_tensor<int32_t>({1}, {1})).run(), Catch::Contains("int32"));
}

TEST_CASE("variadic ops on empty and large tensors", "[variadic]") {
  const Tensor e = OpTest("Sum").input(make_tensor<float>({0, 3}, {})).input(make_tensor<float>({3}, {1, 2, 3})).run1();
  CHECK(e.shape() == Shape{0, 3});
  std::vector<float> big(3 * 40000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000);
  const auto y = values<float>(OpTest("Sum").threads(2).input(make_tensor<float>({40000, 3}, big)).input(
      make_tensor<float>({40000, 1}, std::vector<float>(40000, 1.0f))).run1());
  bool ok = true;
  for (size_t i = 0; i < big.size(); ++i) ok &= y[i] == big[i] + 1;
  CHECK(ok);
}

TEST_CASE("Where broadcasts condition, X and Y of any dtype", "[variadic][where]") {
  const Tensor c = make_tensor<bool>({2, 1}, {true, false});
  const Tensor x = make_tensor<int64_t>({3}, {1, 2, 3});
  const Tensor y = make_tensor<int64_t>({}, {-1});
  const Tensor out = OpTest("Where").input(c).input(x).input(y).run1();
  CHECK(out.shape() == Shape{2, 3});
  CHECK(values<int64_t>(out) == std::vector<int64_t>{1, 2, 3, -1, -1, -1});
  const Tensor bx = make_tensor<bool>({2}, {true, true}), by = make_tensor<bool>({2}, {false, false});
  CHECK(values<bool>(OpTest("Where").input(make_tensor<bool>({2}, {false, true})).input(bx).input(by).run1()) ==
        std::vector<bool>{false, true});
  const Tensor h = OpTest("Where").input(make_tensor<bool>({1}, {false})).input(make_tensor_as(DType::F16, {2}, {1, 2}))
                       .input(make_tensor_as(DType::F16, {2}, {3, 4})).run1();
  CHECK(to_doubles(h) == std::vector<double>{3, 4});
  CHECK_THROWS_WITH(OpTest("Where").input(make_tensor<int32_t>({1}, {1})).input(x).input(y).run(),
                    Catch::Contains("condition"));
}
