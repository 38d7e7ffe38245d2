// graph/passes/shape_expr.h: the Expand and Reshape targets exporters compute
// from a cache's Shape, read as the cache's dims for every size; and each
// form it must not read (an index, a rank or a comparison it cannot know).
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "graph/onnx/onnx_loader.h"
#include "graph/passes/shape_expr.h"
#include "model_builder.h"
#include "repeat_kv_util.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::RepeatTargets;
using onebit::test::add_repeat_kv_targets;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7;

ModelBuilder repeat_targets(const RepeatTargets& c, int64_t opset = 21) {
  ModelBuilder b(opset);
  b.input("x", kFloat, {-1, 2, -1, 8}).output("e", kInt64, {5}).output("r", kInt64, {4});
  if (!c.gather1.empty()) b.input(c.gather1, kInt64, {});
  add_repeat_kv_targets(b, "x", "", "e", "r", c);
  return b;
}

struct Result {
  std::optional<ShapeExpr> e, r;
  int x = -1;
};

Result evaluate(const ModelBuilder& b, const std::string& name, int64_t rank = 4) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  const Graph g = load_onnx(path);
  Result out;
  out.x = g.find_value("x");
  const RankOf rank_of = [&](int v) -> int64_t { return v == out.x ? rank : -1; };
  out.e = shape_expr(g, g.find_value("e"), rank_of);
  out.r = shape_expr(g, g.find_value("r"), rank_of);
  return out;
}

}  // namespace

TEST_CASE("shape expressions: genai's repeat_kv targets are the cache's dims with the repeat", "[shape_expr]") {
  for (int64_t opset : {17, 21}) {
    CAPTURE(opset);
    const Result res = evaluate(repeat_targets({}, opset), "shape_expr_repeat");
    REQUIRE(res.e);
    REQUIRE(res.r);
    const int x = res.x;
    CHECK_FALSE(res.e->boolean);
    CHECK_FALSE(res.e->scalar);
    CHECK(res.e->terms ==
          std::vector<ShapeTerm>{dim_term(x, 0), dim_term(x, 1), constant_term(3), dim_term(x, 2), dim_term(x, 3)});
    CHECK(res.r->terms == std::vector<ShapeTerm>{dim_term(x, 0), dim_term(x, 1, 3), dim_term(x, 2), dim_term(x, 3)});
  }
}

// The cache's rank unknown: its dims are gathered at 0..3, which name the
// same dims whatever the rank (a rank below 4 fails the Gathers).
TEST_CASE("shape expressions: the repeat targets of a cache of unknown rank", "[shape_expr]") {
  const Result res = evaluate(repeat_targets({}), "shape_expr_rank", -1);
  REQUIRE(res.e);
  REQUIRE(res.r);
  const int x = res.x;
  CHECK(res.e->terms ==
        std::vector<ShapeTerm>{dim_term(x, 0), dim_term(x, 1), constant_term(3), dim_term(x, 2), dim_term(x, 3)});
  CHECK(res.r->terms == std::vector<ShapeTerm>{dim_term(x, 0), dim_term(x, 1, 3), dim_term(x, 2), dim_term(x, 3)});
}

TEST_CASE("shape expressions: what cannot be known for every size gives none", "[shape_expr]") {
  SECTION("an index that is an input") {
    RepeatTargets c;
    c.gather1 = "idx";
    const Result res = evaluate(repeat_targets(c), "shape_expr_index");
    CHECK_FALSE(res.e);
    CHECK_FALSE(res.r);
  }
  SECTION("an Equal against a size a dim may have") {
    RepeatTargets c;
    c.equal_to = 5;
    const Result res = evaluate(repeat_targets(c), "shape_expr_equal");
    CHECK_FALSE(res.e);
    REQUIRE(res.r);  // r does not read the comparison
  }
  SECTION("a ConstantOfShape with its float default") {
    RepeatTargets c;
    c.cos_value = false;
    CHECK_FALSE(evaluate(repeat_targets(c), "shape_expr_cos").e);
  }
  SECTION("a product of two dims") {
    RepeatTargets c;
    c.two_dims = true;
    const Result res = evaluate(repeat_targets(c), "shape_expr_two_dims");
    CHECK(res.e);
    CHECK_FALSE(res.r);
  }
}

TEST_CASE("shape expressions: decided comparisons, slices, negative indices", "[shape_expr]") {
  ModelBuilder b;
  b.input("x", kFloat, {-1, 2, -1, 8}).output("a", kInt64, {2}).output("c", kInt64, {1}).output("w", kInt64, {2});
  b.output("bad", kInt64, {1}).output("add", kInt64, {1});
  b.initializer<int64_t>("last", kInt64, {1}, {-1});
  b.initializer<int64_t>("five", kInt64, {1}, {5});
  b.initializer<int64_t>("neg", kInt64, {2}, {-2, 7});
  b.initializer<int64_t>("alt", kInt64, {2}, {40, 41});
  b.initializer<int64_t>("far", kInt64, {1}, {4});
  auto& sh = b.node("Shape", {"x"}, {"a"});
  ModelBuilder::attr_int(sh, "start", 1);
  ModelBuilder::attr_int(sh, "end", -1);
  b.node("Shape", {"x"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "last"}, {"c"}), "axis", 0);
  // [dim1, dim2] against [-2, 7]: dim1 is never -2, but dim2 may be 7.
  b.node("Equal", {"a", "neg"}, {"eq"});
  b.node("Where", {"eq", "alt", "a"}, {"w"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "far"}, {"bad"}), "axis", 0);
  b.node("Add", {"c", "five"}, {"add"});
  const std::string path = scratch_dir("shape_expr_forms") + "/model.onnx";
  b.save(path);
  const Graph g = load_onnx(path);
  const int x = g.find_value("x");
  const RankOf rank_of = [&](int v) -> int64_t { return v == x ? 4 : -1; };
  const auto a = shape_expr(g, g.find_value("a"), rank_of);
  REQUIRE(a);
  CHECK(a->terms == std::vector<ShapeTerm>{dim_term(x, 1), dim_term(x, 2)});
  const auto c = shape_expr(g, g.find_value("c"), rank_of);
  REQUIRE(c);
  CHECK(c->terms == std::vector<ShapeTerm>{dim_term(x, 3)});
  CHECK_FALSE(shape_expr(g, g.find_value("w"), rank_of));    // dim2 == 7 depends on the size
  CHECK_FALSE(shape_expr(g, g.find_value("bad"), rank_of));  // index 4 of a rank-4 shape
  CHECK_FALSE(shape_expr(g, g.find_value("add"), rank_of));  // an op it does not read
}

// Gather(Shape(y), i) of a y whose rank is not known is dim i of y for
// i >= 0 (where the Gather yields a value at all); a negative index needs
// the rank, and a Shape with start / end is not read this way.
TEST_CASE("shape expressions: dims gathered from the shape of a value of unknown rank", "[shape_expr]") {
  ModelBuilder b;
  b.input("x", kFloat, {-1, 2, -1, 8}).output("a", kInt64, {2}).output("c", kInt64, {1}).output("w", kInt64, {1});
  b.initializer<float>("unit", kFloat, {}, {1.f});
  b.initializer<int64_t>("idx", kInt64, {2}, {0, 2});
  b.initializer<int64_t>("last", kInt64, {1}, {-1});
  b.node("Mul", {"x", "unit"}, {"y"});
  b.node("Shape", {"y"}, {"s"});
  ModelBuilder::attr_int(b.node("Gather", {"s", "idx"}, {"a"}), "axis", 0);
  ModelBuilder::attr_int(b.node("Gather", {"s", "last"}, {"c"}), "axis", 0);
  auto& sh = b.node("Shape", {"y"}, {"s1"});
  ModelBuilder::attr_int(sh, "start", 1);
  ModelBuilder::attr_int(b.node("Gather", {"s1", "idx"}, {"w"}), "axis", 0);
  const std::string path = scratch_dir("shape_expr_unranked") + "/model.onnx";
  b.save(path);
  const Graph g = load_onnx(path);
  const int y = g.find_value("y");
  REQUIRE_FALSE(g.value(y).has_shape);
  const RankOf unknown = [](int) -> int64_t { return -1; };
  const auto a = shape_expr(g, g.find_value("a"), unknown);
  REQUIRE(a);
  CHECK_FALSE(a->scalar);
  CHECK(a->terms == std::vector<ShapeTerm>{dim_term(y, 0), dim_term(y, 2)});
  CHECK_FALSE(shape_expr(g, g.find_value("c"), unknown));  // -1 needs the rank
  CHECK_FALSE(shape_expr(g, g.find_value("w"), unknown));  // a Shape from dim 1
}
