#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "op_test_util.h"
#include "graph/op_registry.h"
#include "ops/register_ops.h"

using namespace onebit;
using namespace onebit::test;

namespace {
// Reference layer norm over rows of x [rows, n] in double.
std::vector<double> ref_norm(const std::vector<double>& x, int64_t rows, int64_t n, double eps,
                             std::vector<double>* mean = nullptr, std::vector<double>* inv = nullptr) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t k = 0; k < n; ++k) m += x[static_cast<size_t>(r * n + k)];
    m /= static_cast<double>(n);
    for (int64_t k = 0; k < n; ++k) v += std::pow(x[static_cast<size_t>(r * n + k)] - m, 2);
    v /= static_cast<double>(n);
    const double is = 1 / std::sqrt(v + eps);
    if (mean) mean->push_back(m);
    if (inv) inv->push_back(is);
    for (int64_t k = 0; k < n; ++k) y[static_cast<size_t>(r * n + k)] = (x[static_cast<size_t>(r * n + k)] - m) * is;
  }
  return y;
}

std::vector<double> random_values(size_t n, unsigned seed, double offset = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-2, 2);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(offset + d(rng)));
  return v;
}
}  // namespace

TEST_CASE("normalization ops are registered", "[layer_norm]") {
  for (int64_t v = 17; v <= 21; ++v) {
    CHECK(default_op_registry().find("", "LayerNormalization", v) != nullptr);
    CHECK(default_op_registry().find("", "InstanceNormalization", v) != nullptr);
  }
  for (int64_t v = 18; v <= 21; ++v) CHECK(default_op_registry().find("", "GroupNormalization", v) != nullptr);
}

TEST_CASE("LayerNormalization on a hand-computed row", "[layer_norm]") {
  // Row [1, 2, 3, 4]: mean 2.5, var 1.25.
  const auto out = OpTest("LayerNormalization", 17).outputs(3).attr("epsilon", 0.0f)
                       .input(make_tensor<float>({1, 4}, {1, 2, 3, 4}))
                       .input(make_tensor<float>({4}, {1, 2, 1, 1}))
                       .input(make_tensor<float>({4}, {0, 0, 0, 10}))
                       .run();
  const double is = 1 / std::sqrt(1.25);
  CHECK(all_close(to_doubles(out[0]), {-1.5 * is, -0.5 * is * 2, 0.5 * is, 1.5 * is + 10}, 1e-6));
  CHECK(out[1].shape() == Shape{1, 1});
  CHECK(out[1].dtype() == DType::F32);
  CHECK(all_close(to_doubles(out[1]), {2.5}));
  CHECK(all_close(to_doubles(out[2]), {is}, 1e-6));
}

TEST_CASE("LayerNormalization over every axis, with and without bias", "[layer_norm]") {
  const Shape shape{2, 3, 5};
  const auto x = random_values(30, 11, 100.0);  // a large offset: the two-pass variance must not cancel
  for (int64_t axis : {0, 1, 2, -1, -2, -3}) {
    INFO("axis " << axis);
    const int64_t a = axis < 0 ? axis + 3 : axis;
    const int64_t rows = a == 0 ? 1 : a == 1 ? 2 : 6, n = 30 / rows;
    Shape sshape(shape.begin() + a, shape.end());
    const auto s = random_values(static_cast<size_t>(n), 5), b = random_values(static_cast<size_t>(n), 6);
    std::vector<double> mean, inv;
    const auto norm = ref_norm(x, rows, n, 1e-5, &mean, &inv);
    std::vector<double> want(30), want_nb(30);
    for (int64_t i = 0; i < 30; ++i) {
      want[static_cast<size_t>(i)] = norm[static_cast<size_t>(i)] * s[static_cast<size_t>(i % n)] + b[static_cast<size_t>(i % n)];
      want_nb[static_cast<size_t>(i)] = norm[static_cast<size_t>(i)] * s[static_cast<size_t>(i % n)];
    }
    const auto out = OpTest("LayerNormalization", 17).outputs(3).attr("axis", axis)
                         .input(make_tensor_as(DType::F32, shape, x)).input(make_tensor_as(DType::F32, sshape, s))
                         .input(make_tensor_as(DType::F32, sshape, b)).run();
    CHECK(all_close(to_doubles(out[0]), want, 1e-5, 1e-6));
    CHECK(all_close(to_doubles(out[1]), mean, 1e-6));
    CHECK(all_close(to_doubles(out[2]), inv, 1e-5));
    const Tensor y = OpTest("LayerNormalization", 21).attr("axis", axis).input(make_tensor_as(DType::F32, shape, x))
                         .input(make_tensor_as(DType::F32, sshape, s)).run1();
    CHECK(all_close(to_doubles(y), want_nb, 1e-5, 1e-6));
  }
}

TEST_CASE("LayerNormalization with Scale broadcast inside the row", "[layer_norm]") {
  // X [2, 2, 2], axis 1: Scale [2, 1] varies along dim 1 and repeats along dim 2.
  const std::vector<double> x = {1, 2, 3, 5, -1, 0, 1, 3};
  const auto norm = ref_norm(x, 2, 4, 1e-5);
  const Tensor y = OpTest("LayerNormalization", 17).attr("axis", int64_t{1}).input(make_tensor_as(DType::F32, {2, 2, 2}, x))
                       .input(make_tensor<float>({2, 1}, {10, 100})).run1();
  std::vector<double> want(8);
  for (size_t i = 0; i < 8; ++i) want[i] = norm[i] * ((i / 2) % 2 == 0 ? 10 : 100);
  CHECK(all_close(to_doubles(y), want, 1e-5, 1e-5));
}

TEST_CASE("LayerNormalization validates its inputs and attributes", "[layer_norm]") {
  const Tensor x = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK_THROWS_WITH(OpTest("LayerNormalization", 17).attr("axis", int64_t{2}).input(x).input(make_tensor<float>({3}, {1, 1, 1})).run(),
                    Catch::Contains("axis"));
  CHECK_THROWS_WITH(OpTest("LayerNormalization", 17).input(x).input(make_tensor<float>({4}, {1, 1, 1, 1})).run(),
                    Catch::Contains("Scale") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(OpTest("LayerNormalization", 17).attr("stash_type", int64_t{11}).input(x).input(x).run(),
                    Catch::Contains("stash_type"));
  CHECK(OpTest("LayerNormalization", 17).input(make_tensor<float>({0, 3}, {})).input(make_tensor<float>({3}, {1, 1, 1}))
            .run1().shape() == Shape{0, 3});
}

TEST_CASE("LayerNormalization on f16 rounds Normalized before scaling", "[layer_norm]") {
  const Tensor y = OpTest("LayerNormalization", 17).input(make_tensor_as(DType::F16, {1, 2}, {1, 3}))
                       .input(make_tensor_as(DType::F16, {2}, {2, 2})).run1();
  CHECK(y.dtype() == DType::F16);
  const double n = 1 / std::sqrt(1 + 1e-5);
  CHECK(all_close(to_doubles(y), {-2 * n, 2 * n}, 1e-3));
}

TEST_CASE("GroupNormalization-21 per channel and -18 per group", "[layer_norm][group_norm]") {
  // X [1, 4, 2]: two groups of two channels.
  const std::vector<double> x = {1, 2, 3, 4, 10, 20, 30, 40};
  const auto norm = ref_norm(x, 2, 4, 1e-5);
  const Tensor y21 = OpTest("GroupNormalization", 21).attr("num_groups", int64_t{2})
                         .input(make_tensor_as(DType::F32, {1, 4, 2}, x))
                         .input(make_tensor<float>({4}, {1, 2, 3, 4})).input(make_tensor<float>({4}, {0, 0, 0, 1})).run1();
  std::vector<double> want(8);
  const double sc[4] = {1, 2, 3, 4}, bi[4] = {0, 0, 0, 1};
  for (size_t i = 0; i < 8; ++i) want[i] = norm[i] * sc[i / 2] + bi[i / 2];
  CHECK(all_close(to_doubles(y21), want, 1e-5, 1e-6));
  const Tensor y18 = OpTest("GroupNormalization", 18).attr("num_groups", int64_t{2})
                         .input(make_tensor_as(DType::F32, {1, 4, 2}, x))
                         .input(make_tensor<float>({2}, {2, 3})).input(make_tensor<float>({2}, {1, -1})).run1();
  for (size_t i = 0; i < 8; ++i) want[i] = norm[i] * (i < 4 ? 2 : 3) + (i < 4 ? 1 : -1);
  CHECK(all_close(to_doubles(y18), want, 1e-5, 1e-6));
  CHECK_THROWS_WITH(OpTest("GroupNormalization", 21).attr("num_groups", int64_t{3}).input(make_tensor_as(DType::F32, {1, 4, 2}, x))
                        .input(make_tensor<float>({4}, {1, 1, 1, 1})).input(make_tensor<float>({4}, {0, 0, 0, 0})).run(),
                    Catch::Contains("num_groups") && Catch::Contains("divide"));
  CHECK_THROWS_WITH(OpTest("GroupNormalization", 18).attr("num_groups", int64_t{2}).input(make_tensor_as(DType::F32, {1, 4, 2}, x))
                        .input(make_tensor<float>({4}, {1, 1, 1, 1})).input(make_tensor<float>({4}, {0, 0, 0, 0})).run(),
                    Catch::Contains("scale") && Catch::Contains("[2]"));
}

TEST_CASE("InstanceNormalization normalises each channel", "[layer_norm][instance_norm]") {
  const std::vector<double> x = {1, 2, 3, 4, 10, 20, 30, 40, 0, 0, 0, 1};
  const auto norm = ref_norm(x, 3, 4, 1e-3);
  const Tensor y = OpTest("InstanceNormalization", 17).attr("epsilon", 1e-3f).input(make_tensor_as(DType::F32, {1, 3, 2, 2}, x))
                       .input(make_tensor<float>({3}, {1, 2, 3})).input(make_tensor<float>({3}, {0, 1, 2})).run1();
  std::vector<double> want(12);
  for (size_t i = 0; i < 12; ++i) want[i] = norm[i] * static_cast<double>(i / 4 + 1) + static_cast<double>(i / 4);
  CHECK(all_close(to_doubles(y), want, 1e-5, 1e-6));
}

TEST_CASE("InstanceNormalization and GroupNormalization of empty tensors are empty", "[layer_norm][instance_norm]") {
  // No channels: InstanceNormalization's groups are the channels, 0 of them.
  CHECK(OpTest("InstanceNormalization", 17).input(make_tensor<float>({2, 0, 3}, {})).input(make_tensor<float>({0}, {}))
            .input(make_tensor<float>({0}, {})).run1().shape() == Shape{2, 0, 3});
  CHECK(OpTest("InstanceNormalization", 17).input(make_tensor<float>({0, 2, 3}, {}))
            .input(make_tensor<float>({2}, {1, 1})).input(make_tensor<float>({2}, {0, 0}))
            .run1().shape() == Shape{0, 2, 3});
  CHECK(OpTest("GroupNormalization", 21).attr("num_groups", int64_t{2}).input(make_tensor<float>({1, 4, 0}, {}))
            .input(make_tensor<float>({4}, {1, 1, 1, 1})).input(make_tensor<float>({4}, {0, 0, 0, 0})).run1().shape() ==
        Shape{1, 4, 0});
}
