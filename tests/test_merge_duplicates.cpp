// Duplicate nodes merged (graph/passes/merge_duplicates.cpp): run with and
// without the pass, outputs bit-identical, node counts; must-not-fire cases
// (other inputs or attributes, a graph output, random ops, contrib ops,
// other optional outputs).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <random>

#include "base/thread_pool.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/passes/passes.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"
#include "pass_test_util.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1;

void attr_float(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

// Rotary-like: Cos and Sin of one angle table taken twice, a chain on top of
// a duplicate (Neg of each Cos: merged only once the Cos are), a Transpose
// twice with one perm and once with none, LeakyRelu with two alphas, and a
// duplicate Cos that is a graph output.
ModelBuilder repeated() {
  ModelBuilder b;
  b.input("x", kFloat, {4, 6}).output("y", kFloat, {4, 6}).output("yt", kFloat, {6, 4}).output("cos_out", kFloat, {4, 6});
  b.node("Cos", {"x"}, {"c1"}, "cos1");
  b.node("Sin", {"x"}, {"s1"}, "sin1");
  b.node("Cos", {"x"}, {"c2"}, "cos2");
  b.node("Sin", {"x"}, {"s2"}, "sin2");
  b.node("Neg", {"c1"}, {"n1"}, "neg1");
  b.node("Neg", {"c2"}, {"n2"}, "neg2");
  b.node("Mul", {"n1", "s1"}, {"p1"}, "mul1");
  b.node("Mul", {"n2", "s2"}, {"p2"}, "mul2");  // a duplicate of mul1 once its inputs merge
  b.node("Sub", {"p1", "p2"}, {"d"}, "sub");     // reads a value and its duplicate: 0 either way
  attr_float(b.node("LeakyRelu", {"x"}, {"l1"}, "leaky1"), "alpha", 0.1f);
  attr_float(b.node("LeakyRelu", {"x"}, {"l2"}, "leaky2"), "alpha", 0.2f);
  b.node("Add", {"l1", "l2"}, {"l"}, "add_l");
  b.node("Add", {"d", "l"}, {"y0"}, "add0");
  b.node("Add", {"y0", "p1"}, {"y"}, "add_y");
  ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"t1"}, "t1"), "perm", {1, 0});
  ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"t2"}, "t2"), "perm", {1, 0});
  b.node("Transpose", {"x"}, {"t3"}, "t3");  // the default perm, written differently: kept
  b.node("Add", {"t1", "t2"}, {"t12"}, "add_t12");
  b.node("Add", {"t12", "t3"}, {"yt"}, "add_t");
  b.node("Cos", {"x"}, {"cos_out"}, "cos_out");  // a graph output: kept
  return b;
}

bool has_node(const Graph& g, const std::string& name) {
  for (const Node& n : g.nodes)
    if (n.name == name) return true;
  return false;
}

// The pass alone on the graph `b` describes; the graph after it.
Graph merged(const ModelBuilder& b, const std::string& name, int64_t* count) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  Graph g = load_onnx(path);
  SessionOptions options;
  PassReport report;
  ThreadPool pool(1);
  PassContext ctx{options, default_op_registry(), report, pool};
  merge_duplicate_nodes(g, ctx);
  *count = report.get("duplicates_merged");
  return g;
}

}  // namespace

TEST_CASE("merge duplicates: repeated nodes computed once, outputs bit-identical", "[pass][merge]") {
  const int stop = test::pass_index("merge-duplicate-nodes");
  Session on = test::session_until(repeated(), "merge_on"), off = test::session_until(repeated(), "merge_off", stop);
  CHECK(on.pass_report().get("duplicates_merged") == 5);  // cos2, sin2, neg2, mul2, t2
  CHECK(off.pass_report().get("duplicates_merged") == 0);
  CHECK(off.graph().nodes.size() == on.graph().nodes.size() + 5);
  for (const char* gone : {"cos2", "sin2", "neg2", "mul2", "t2"}) CHECK_FALSE(has_node(on.graph(), gone));
  for (const char* kept : {"cos1", "sin1", "neg1", "mul1", "t1", "t3", "leaky1", "leaky2", "cos_out"})
    CHECK(has_node(on.graph(), kept));
  // The Sub now reads one value twice.
  for (const Node& n : on.graph().nodes)
    if (n.name == "sub") CHECK(n.inputs[0] == n.inputs[1]);

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (int round = 0; round < 3; ++round) {
    Tensor x = Tensor::allocate(DType::F32, {4, 6});
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = u(rng);
    const std::vector<Tensor> a = on.run({{"x", x}});
    const std::vector<Tensor> b = off.run({{"x", x}});
    REQUIRE(a.size() == 3);
    REQUIRE(b.size() == 3);
    for (size_t o = 0; o < a.size(); ++o) {
      REQUIRE(a[o].shape() == b[o].shape());
      CHECK(std::memcmp(a[o].raw(), b[o].raw(), a[o].bytes()) == 0);
    }
  }
}

TEST_CASE("merge duplicates: nodes that differ, or must stay, are not merged", "[pass][merge]") {
  int64_t count = -1;
  SECTION("other inputs, other attributes, a graph output") {
    ModelBuilder b;
    b.input("x", kFloat, {3}).input("w", kFloat, {3}).output("y", kFloat, {3}).output("c3", kFloat, {3});
    b.node("Cos", {"x"}, {"c1"}, "cos_x");
    b.node("Cos", {"w"}, {"c2"}, "cos_w");
    attr_float(b.node("Elu", {"x"}, {"e1"}, "elu1"), "alpha", 0.5f);
    attr_float(b.node("Elu", {"x"}, {"e2"}, "elu2"), "alpha", -0.5f);
    b.node("Cos", {"x"}, {"c3"}, "cos_out");
    b.node("Sum", {"c1", "c2", "e1", "e2"}, {"y"}, "sum");
    const Graph g = merged(b, "merge_differ", &count);
    CHECK(count == 0);
    CHECK(g.nodes.size() == 6);
  }
  SECTION("random ops and Dropout") {
    ModelBuilder b(22);
    b.input("x", kFloat, {3}).output("y", kFloat, {3});
    b.node("RandomUniformLike", {"x"}, {"r1"}, "r1");
    b.node("RandomUniformLike", {"x"}, {"r2"}, "r2");
    b.node("Dropout", {"x"}, {"d1"}, "d1");
    b.node("Dropout", {"x"}, {"d2"}, "d2");
    b.node("Sum", {"r1", "r2", "d1", "d2"}, {"y"}, "sum");
    const Graph g = merged(b, "merge_random", &count);
    CHECK(count == 0);
    CHECK(g.nodes.size() == 5);
  }
  SECTION("contrib ops keep what they hold") {
    ModelBuilder b;
    auto* os = b.proto().add_opset_import();
    os->set_domain("com.microsoft");
    os->set_version(1);
    b.input("x", kFloat, {3}).output("y", kFloat, {3});
    b.node("Gelu", {"x"}, {"g1"}, "g1").set_domain("com.microsoft");
    b.node("Gelu", {"x"}, {"g2"}, "g2").set_domain("com.microsoft");
    b.node("Add", {"g1", "g2"}, {"y"}, "add");
    const Graph g = merged(b, "merge_contrib", &count);
    CHECK(count == 0);
    CHECK(g.nodes.size() == 3);
  }
  SECTION("other optional outputs") {
    ModelBuilder b;
    b.input("x", kFloat, {2, 4}).input("scale", kFloat, {4}).output("y", kFloat, {2, 4}).output("m", kFloat, {2, 1});
    b.node("LayerNormalization", {"x", "scale"}, {"n1"}, "ln1");
    b.node("LayerNormalization", {"x", "scale"}, {"n2", "m"}, "ln2");
    b.node("Add", {"n1", "n2"}, {"y"}, "add");
    const Graph g = merged(b, "merge_optional", &count);
    CHECK(count == 0);
    CHECK(g.nodes.size() == 3);
  }
  SECTION("the same node twice merges (the control)") {
    ModelBuilder b;
    b.input("x", kFloat, {2, 4}).input("scale", kFloat, {4}).output("y", kFloat, {2, 4});
    b.node("LayerNormalization", {"x", "scale"}, {"n1"}, "ln1");
    b.node("LayerNormalization", {"x", "scale"}, {"n2"}, "ln2");
    b.node("Add", {"n1", "n2"}, {"y"}, "add");
    const Graph g = merged(b, "merge_control", &count);
    CHECK(count == 1);
    REQUIRE(g.nodes.size() == 2);
    CHECK(g.nodes[1].inputs[0] == g.nodes[1].inputs[1]);
  }
}

// Each layer's mask Where of torch.onnx's TorchScript export reads Constants
// of its own for 0 and -inf: small constants of one dtype, shape and bytes
// count as the same input. -0 is not +0, [1] is not [], float is not int.
TEST_CASE("merge duplicates: equal small constants are the same input", "[pass][merge]") {
  constexpr int32_t kBool = 9;
  const float inf = std::numeric_limits<float>::infinity();
  ModelBuilder b;
  b.input("c", kBool, {2, 3}).output("y", kFloat, {2, 3});
  b.initializer<float>("zero_a", kFloat, {}, {0.0f});
  b.initializer<float>("zero_b", kFloat, {}, {0.0f});
  b.initializer<float>("zero_c", kFloat, {}, {0.0f});
  b.initializer<float>("neg_zero", kFloat, {}, {-0.0f});
  b.initializer<float>("zero_1", kFloat, {1}, {0.0f});
  b.initializer<int32_t>("int_zero", 6, {}, {0});  // the bytes of a float 0, another dtype
  b.initializer<float>("low_a", kFloat, {}, {-inf});
  b.initializer<float>("low_b", kFloat, {}, {-inf});
  b.node("Where", {"c", "zero_a", "low_a"}, {"m1"}, "where1");
  b.node("Where", {"c", "zero_b", "low_b"}, {"m2"}, "where2");      // equal constants: merged
  b.node("Where", {"c", "zero_c", "low_a"}, {"m3"}, "where3");      // merged
  b.node("Where", {"c", "neg_zero", "low_b"}, {"m4"}, "where_neg");  // -0: kept
  b.node("Where", {"c", "zero_1", "low_b"}, {"m5"}, "where_rank1");  // [1]: kept
  ModelBuilder::attr_int(b.node("Cast", {"zero_a"}, {"f1"}, "cast_float"), "to", 1);
  ModelBuilder::attr_int(b.node("Cast", {"int_zero"}, {"f2"}, "cast_int"), "to", 1);  // kept
  b.node("Sum", {"m1", "m2", "m3", "m4", "m5", "f1", "f2"}, {"y"}, "sum");
  int64_t count = -1;
  const Graph g = merged(b, "merge_constants", &count);
  CHECK(count == 2);
  CHECK_FALSE(has_node(g, "where2"));
  CHECK_FALSE(has_node(g, "where3"));
  for (const char* kept : {"where1", "where_neg", "where_rank1", "cast_float", "cast_int"}) CHECK(has_node(g, kept));

  const int stop = test::pass_index("merge-duplicate-nodes");
  Session on = test::session_until(b, "merge_constants_on"), off = test::session_until(b, "merge_constants_off", stop);
  Tensor c = Tensor::allocate(DType::Bool, {2, 3});
  for (int64_t i = 0; i < c.size(); ++i) c.data<bool>()[i] = i % 2 == 0;
  const Tensor y1 = on.run({{"c", c}})[0], y2 = off.run({{"c", c}})[0];
  REQUIRE(y1.shape() == y2.shape());
  CHECK(std::memcmp(y1.raw(), y2.raw(), y1.bytes()) == 0);
}
