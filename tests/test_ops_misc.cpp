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
Tensor i64(Shape s, std::vector<int64_t> v) { return make_tensor<int64_t>(std::move(s), v); }
}  // namespace

TEST_CASE("misc ops are registered for opsets 17-21", "[misc]") {
  for (const char* op : {"CumSum", "Trilu", "EyeLike", "OneHot", "TopK", "NonZero", "Einsum"})
    for (int64_t v = 17; v <= 21; ++v) {
      INFO(op << " opset " << v);
      CHECK(default_op_registry().find("", op, v) != nullptr);
    }
}

TEST_CASE("CumSum: inclusive, exclusive, reverse, axis input", "[misc][cumsum]") {
  const Tensor x = make_tensor<float>({3}, {1, 2, 3});
  auto run = [&](int ex, int rev) {
    return values<float>(OpTest("CumSum").attr("exclusive", int64_t{ex}).attr("reverse", int64_t{rev}).input(x)
                             .input(make_tensor<int32_t>({}, {0})).run1());
  };
  CHECK(run(0, 0) == std::vector<float>{1, 3, 6});
  CHECK(run(1, 0) == std::vector<float>{0, 1, 3});
  CHECK(run(0, 1) == std::vector<float>{6, 5, 3});
  CHECK(run(1, 1) == std::vector<float>{5, 3, 0});
  const Tensor m = make_tensor<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(values<int64_t>(OpTest("CumSum").input(m).input(i64({}, {-1})).run1()) ==
        std::vector<int64_t>{1, 3, 6, 4, 9, 15});
  CHECK(values<int64_t>(OpTest("CumSum").input(m).input(i64({1}, {0})).run1()) ==
        std::vector<int64_t>{1, 2, 3, 5, 7, 9});
  CHECK_THROWS_WITH(OpTest("CumSum").input(m).input(i64({}, {2})).run(), Catch::Contains("axis"));
  CHECK(OpTest("CumSum").input(make_tensor<float>({0, 2}, {})).input(i64({}, {1})).run1().shape() == Shape{0, 2});
}

TEST_CASE("Trilu keeps the upper or lower triangle around diagonal k", "[misc][trilu]") {
  const Tensor x = make_tensor<int32_t>({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(values<int32_t>(OpTest("Trilu").input(x).run1()) == std::vector<int32_t>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(values<int32_t>(OpTest("Trilu").input(x).input(i64({}, {1})).run1()) ==
        std::vector<int32_t>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  CHECK(values<int32_t>(OpTest("Trilu").attr("upper", int64_t{0}).input(x).input(i64({}, {-1})).run1()) ==
        std::vector<int32_t>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(values<int32_t>(OpTest("Trilu").attr("upper", int64_t{0}).input(x).input(i64({}, {5})).run1()) ==
        values<int32_t>(x));
  // Batched, bool.
  const Tensor b = make_tensor<bool>({2, 2, 2}, {true, true, true, true, true, true, true, true});
  CHECK(values<bool>(OpTest("Trilu").attr("upper", int64_t{0}).input(b).run1()) ==
        std::vector<bool>{true, false, true, true, true, false, true, true});
  CHECK_THROWS_WITH(OpTest("Trilu").input(make_tensor<float>({3}, {1, 2, 3})).run(), Catch::Contains("[3]"));
}

TEST_CASE("EyeLike with k and dtype", "[misc][eyelike]") {
  const Tensor x = make_tensor<int32_t>({3, 4}, std::vector<int32_t>(12, 7));
  CHECK(values<int32_t>(OpTest("EyeLike").input(x).run1()) == std::vector<int32_t>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0});
  const Tensor f = OpTest("EyeLike").attr("k", int64_t{-1}).attr("dtype", int64_t{1}).input(x).run1();
  CHECK(values<float>(f) == std::vector<float>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(values<bool>(OpTest("EyeLike").attr("k", int64_t{3}).attr("dtype", int64_t{9}).input(x).run1()) ==
        std::vector<bool>{false, false, false, true, false, false, false, false, false, false, false, false});
  CHECK_THROWS_WITH(OpTest("EyeLike").input(make_tensor<float>({2}, {1, 2})).run(), Catch::Contains("2-D"));
}

TEST_CASE("OneHot with negative indices, out of range and axis", "[misc][onehot]") {
  const Tensor idx = make_tensor<int64_t>({4}, {0, -1, 3, 7});
  const Tensor vals = make_tensor<float>({2}, {0, 5});
  const Tensor y = OpTest("OneHot").input(idx).constant(make_tensor<int64_t>({}, {4})).input(vals).run1();
  CHECK(y.shape() == Shape{4, 4});
  CHECK(values<float>(y) == std::vector<float>{5, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 0});
  const Tensor y0 = OpTest("OneHot").attr("axis", int64_t{0}).input(make_tensor<float>({2}, {1, 2}))
                        .constant(make_tensor<float>({1}, {3})).input(make_tensor<int32_t>({2}, {-1, 1})).run1();
  CHECK(y0.shape() == Shape{3, 2});
  CHECK(values<int32_t>(y0) == std::vector<int32_t>{-1, -1, 1, -1, -1, 1});
  CHECK_THROWS_WITH(OpTest("OneHot").input(idx).constant(make_tensor<int64_t>({}, {0})).input(vals).run(),
                    Catch::Contains("depth"));
}

TEST_CASE("TopK largest/smallest, ties by index, NaN ranks highest", "[misc][topk]") {
  const Tensor x = make_tensor_as(DType::F32, {2, 4}, {1, 3, 3, 2, kNaN, 0, 5, 0});
  const auto top = OpTest("TopK").outputs(2).input(x).constant(i64({1}, {2})).run();
  CHECK(top[0].shape() == Shape{2, 2});
  const auto v = to_doubles(top[0]);
  CHECK(v[0] == 3);
  CHECK(v[1] == 3);
  CHECK(std::isnan(v[2]));
  CHECK(v[3] == 5);
  CHECK(values<int64_t>(top[1]) == std::vector<int64_t>{1, 2, 0, 2});
  const auto low = OpTest("TopK").outputs(2).attr("largest", int64_t{0}).input(x).constant(i64({1}, {3})).run();
  CHECK(all_close(to_doubles(low[0]), {1, 2, 3, 0, 0, 5}));
  CHECK(values<int64_t>(low[1]) == std::vector<int64_t>{0, 3, 1, 1, 3, 2});
  // Along axis 0, with K fed at run time.
  const auto col = OpTest("TopK").outputs(2).attr("axis", int64_t{0}).input(make_tensor<int32_t>({3, 2}, {1, 6, 5, 2, 3, 4}))
                       .input(i64({1}, {1})).run();
  CHECK(values<int32_t>(col[0]) == std::vector<int32_t>{5, 6});
  CHECK(values<int64_t>(col[1]) == std::vector<int64_t>{1, 0});
  CHECK_THROWS_WITH(OpTest("TopK").outputs(2).input(x).constant(i64({1}, {5})).run(),
                    Catch::Contains("K is 5") && Catch::Contains("[0, 4]"));
  CHECK(OpTest("TopK").outputs(2).input(x).constant(i64({1}, {0})).run()[0].shape() == Shape{2, 0});
}

TEST_CASE("NonZero plans its output from the data", "[misc][nonzero]") {
  const Tensor x = make_tensor<float>({2, 3}, {0, 1, 0, -2, 0, 3});
  const Tensor y = OpTest("NonZero").input(x).run1();
  CHECK(y.shape() == Shape{2, 3});
  CHECK(values<int64_t>(y) == std::vector<int64_t>{0, 1, 1, 1, 0, 2});
  // Run twice through one session: each run re-plans from the values.
  CHECK(OpTest("NonZero").input(make_tensor<bool>({3}, {false, false, false})).run(2)[0].shape() == Shape{1, 0});
  CHECK(OpTest("NonZero").input(make_tensor<int32_t>({}, {5})).run1().shape() == Shape{0, 1});
  CHECK(values<int64_t>(OpTest("NonZero").constant(make_tensor<int8_t>({4}, {0, 3, 0, 1})).run1()) ==
        std::vector<int64_t>{1, 3});
}

TEST_CASE("Einsum: matmul, batch, transpose, trace, diagonal, implicit output", "[misc][einsum]") {
  const Tensor a = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = make_tensor<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  CHECK(values<float>(OpTest("Einsum").attr("equation", "ij,jk->ik").input(a).input(b).run1()) ==
        std::vector<float>{4, 5, 10, 11});
  CHECK(values<float>(OpTest("Einsum").attr("equation", "ij,jk").input(a).input(b).run1()) ==
        std::vector<float>{4, 5, 10, 11});
  const Tensor t = OpTest("Einsum").attr("equation", "ij->ji").input(a).run1();
  CHECK(t.shape() == Shape{3, 2});
  CHECK(values<float>(t) == std::vector<float>{1, 4, 2, 5, 3, 6});
  const Tensor sq = make_tensor<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(values<float>(OpTest("Einsum").attr("equation", "ii").input(sq).run1()) == std::vector<float>{15});
  CHECK(values<float>(OpTest("Einsum").attr("equation", "ii->i").input(sq).run1()) == std::vector<float>{1, 5, 9});
  CHECK(values<float>(OpTest("Einsum").attr("equation", "ij -> i").input(a).run1()) == std::vector<float>{6, 15});
  // Implicit output sorts the free labels: "ba" gives "ab", a transpose.
  CHECK(values<float>(OpTest("Einsum").attr("equation", "ba").input(a).run1()) ==
        std::vector<float>{1, 4, 2, 5, 3, 6});
  const Tensor x = make_tensor<float>({2, 1, 2}, {1, 2, 3, 4});
  const Tensor bm = OpTest("Einsum").attr("equation", "...ij,...jk->...ik").input(x).input(make_tensor<float>({2, 2, 1}, {1, 1, 1, 2}))
                        .run1();
  CHECK(bm.shape() == Shape{2, 1, 1});
  CHECK(values<float>(bm) == std::vector<float>{3, 11});
  // The ellipsis broadcasts: [2, 1, 2] against a [1, 2, 1] batch of one.
  const Tensor bb = OpTest("Einsum").attr("equation", "...ij,...jk->...ik").input(x)
                        .input(make_tensor<float>({1, 2, 1}, {1, 2})).run1();
  CHECK(values<float>(bb) == std::vector<float>{5, 11});
  CHECK(values<int32_t>(OpTest("Einsum").attr("equation", "i,i").input(make_tensor<int32_t>({3}, {1, 2, 3}))
                            .input(make_tensor<int32_t>({3}, {4, 5, 6})).run1()) == std::vector<int32_t>{32});
  CHECK_THROWS_WITH(OpTest("Einsum").attr("equation", "ij,jk->ik").input(a).input(a).run(),
                    Catch::Contains("label 'j'"));
  CHECK_THROWS_WITH(OpTest("Einsum").attr("equation", "ij,jk->ik").input(a).run(), Catch::Contains("2 terms"));
  CHECK_THROWS_WITH(OpTest("Einsum").attr("equation", "ij->iz").input(a).run(), Catch::Contains("'z'"));
}

TEST_CASE("Pad: pads past the largest tensor are an error, not an overflow", "[misc][pad][hostile]") {
  // fuzz_op: pads of 8.6e18 and 4.2e18 summed past int64 (tests/fuzz/corpus/op/regression-pad-pads-overflow).
  const Tensor x = make_tensor<float>({2}, {1, 2});
  CHECK_THROWS_WITH(OpTest("Pad").input(x).constant(make_tensor<int64_t>({2}, {8584119253433581437, 4195730024608447162})).run(),
                    Catch::Contains("past the largest tensor"));
  CHECK_THROWS_WITH(OpTest("Pad").input(x).constant(make_tensor<int64_t>({2}, {INT64_MIN + 1, INT64_MAX})).run(),
                    Catch::Contains("past the largest tensor"));
  // Large but bounded pads in opposite directions crop and pad as usual.
  const Tensor y = OpTest("Pad").input(x).constant(make_tensor<int64_t>({2}, {-1, 3})).run1();
  CHECK(y.shape() == Shape{4});
  CHECK(values<float>(y) == std::vector<float>{2, 0, 0, 0});
}

// Opsets 13 to 16 (what torch.onnx and Optimum wrote for most published
// language models): each node runs at its imported version, so an attribute
// or input a later version added is an error there, named with the opset it
// needs, and the versions' shared behaviour is the same.
TEST_CASE("ops at opsets 13-16 refuse what later versions added", "[misc][opset]") {
  const Tensor x = make_tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Relu", "Where", "Shape", "Reshape", "Pad", "ScatterND",
                         "ScatterElements", "Identity", "If", "CumSum", "LessOrEqual", "GreaterOrEqual", "LeakyRelu",
                         "PRelu"})
    for (int64_t v = 13; v <= 16; ++v) {
      INFO(op << " opset " << v);
      CHECK(default_op_registry().find("", op, v) != nullptr);
    }
  // Introduced after 13: not found at 13 (the loader lists them as unsupported).
  CHECK(default_op_registry().find("", "CastLike", 14) == nullptr);
  CHECK(default_op_registry().find("", "LayerNormalization", 16) == nullptr);
  CHECK(default_op_registry().find("", "Trilu", 13) == nullptr);

  // Shape-15's start and end.
  CHECK(values<int64_t>(OpTest("Shape", 13).input(x).run1()) == std::vector<int64_t>{2, 3});
  CHECK(values<int64_t>(OpTest("Shape", 15).attr("start", int64_t{1}).input(x).run1()) == std::vector<int64_t>{3});
  CHECK_THROWS_WITH(OpTest("Shape", 14).attr("start", int64_t{1}).input(x).run(),
                    Catch::Contains("'start'") && Catch::Contains("opset 15") && Catch::Contains("opset 14"));
  CHECK_THROWS_WITH(OpTest("Shape", 13).attr("end", int64_t{1}).input(x).run(), Catch::Contains("'end'"));

  // Reshape-14's allowzero; a 0 copies the input's dim at 13.
  CHECK(OpTest("Reshape", 13).input(x).constant(i64({2}, {0, -1})).run1().shape() == Shape{2, 3});
  CHECK_THROWS_WITH(OpTest("Reshape", 13).attr("allowzero", int64_t{0}).input(x).constant(i64({2}, {0, -1})).run(),
                    Catch::Contains("'allowzero'") && Catch::Contains("opset 14"));

  // ScatterND / ScatterElements-16's reduction.
  const Tensor data = make_tensor<float>({3}, {1, 2, 3});
  const Tensor idx = i64({1, 1}, {1});
  const Tensor upd = make_tensor<float>({1}, {10});
  CHECK(values<float>(OpTest("ScatterND", 13).input(data).input(idx).input(upd).run1()) ==
        std::vector<float>{1, 10, 3});
  CHECK(values<float>(OpTest("ScatterND", 16).attr("reduction", "add").input(data).input(idx).input(upd).run1()) ==
        std::vector<float>{1, 12, 3});
  CHECK_THROWS_WITH(OpTest("ScatterND", 13).attr("reduction", "add").input(data).input(idx).input(upd).run(),
                    Catch::Contains("'reduction'") && Catch::Contains("opset 16"));
  CHECK_THROWS_WITH(
      OpTest("ScatterElements", 15).attr("reduction", "none").input(data).input(i64({1}, {1})).input(upd).run(),
      Catch::Contains("'reduction'") && Catch::Contains("opset 16"));

  // Pad-18's axes input.
  const Tensor v = make_tensor<float>({2}, {1, 2});
  CHECK(values<float>(OpTest("Pad", 13).input(v).constant(i64({2}, {1, 0})).run1()) == std::vector<float>{0, 1, 2});
  CHECK(values<float>(OpTest("Pad", 18).input(v).constant(i64({2}, {1, 0})).omit().constant(i64({1}, {0})).run1()) ==
        std::vector<float>{0, 1, 2});
  CHECK_THROWS_WITH(OpTest("Pad", 13).input(v).constant(i64({2}, {1, 0})).omit().constant(i64({1}, {0})).run(),
                    Catch::Contains("axes") && Catch::Contains("opset 18"));
}
