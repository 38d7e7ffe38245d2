// The session: plan-time folding of shape subgraphs, nodes planned at run
// time when a shape needs a value, arena reuse by lifetime, steady runs that
// allocate no buffers, input checks, and the pass switch.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7;

Tensor floats(Shape shape, float start = 0) {
  Tensor t = Tensor::allocate(DType::F32, std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = start + float(i);
  return t;
}

Tensor int64s(std::vector<int64_t> v) {
  Tensor t = Tensor::allocate(DType::I64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

Session session_for(const ModelBuilder& b, const std::string& name, SessionOptions opts = {}) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  return Session(load_onnx(path), default_op_registry(), opts);
}

std::string run_error(Session& s, const std::vector<NamedTensor>& inputs) {
  try {
    s.run(inputs);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected the run to be rejected");
  return {};
}

}  // namespace

TEST_CASE("session: a shape subgraph folds at plan time", "[session]") {
  // y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) : [a, b, c] -> [a, b*c]
  ModelBuilder b;
  b.input("x", kFloat, {-1, -1, -1}).output("y", kFloat, {-1, -1});
  b.initializer<int64_t>("zero", kInt64, {}, {0});
  b.initializer<int64_t>("axes0", kInt64, {1}, {0});
  b.initializer<int64_t>("minus1", kInt64, {1}, {-1});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"a"});
  b.node("Unsqueeze", {"a", "axes0"}, {"a1"});
  b.node("Concat", {"a1", "minus1"}, {"target"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  b.node("Reshape", {"x", "target"}, {"r"});
  b.node("Add", {"r", "r"}, {"y"});
  Session s = session_for(b, "session_fold");
  auto out = s.run({{"x", floats({2, 3, 4})}});
  CHECK(out[0].shape() == Shape{2, 12});
  CHECK(out[0].data<float>()[23] == 46.f);
  // Shape, Gather, Unsqueeze, Concat folded; Reshape (a view) and Add ran.
  CHECK(s.stats().nodes_run == 2);
  out = s.run({{"x", floats({5, 1, 2})}});
  CHECK(out[0].shape() == Shape{5, 2});
  CHECK(s.stats().plans_built == 2);
}

TEST_CASE("session: a shape that needs a run-time value is planned at run time", "[session]") {
  ModelBuilder b;
  b.input("x", kFloat, {6}).input("shape", kInt64, {2}).output("y", kFloat, {-1, -1});
  b.node("Reshape", {"x", "shape"}, {"r"});
  b.node("Add", {"r", "r"}, {"y"});
  Session s = session_for(b, "session_dynamic");
  auto out = s.run({{"x", floats({6})}, {"shape", int64s({3, 2})}});
  CHECK(out[0].shape() == Shape{3, 2});
  CHECK(out[0].data<float>()[5] == 10.f);
  out = s.run({{"x", floats({6})}, {"shape", int64s({2, -1})}});
  CHECK(out[0].shape() == Shape{2, 3});
  CHECK(s.stats().plans_built == 1);  // same input shapes: one plan, the node re-planned each run
}

TEST_CASE("session: buffers are reused by lifetime", "[session][memory]") {
  // A chain of 12 adds on [1024] floats: at most three buffers live at once.
  ModelBuilder b;
  b.input("x", kFloat, {1024}).output("y", kFloat, {1024});
  std::string prev = "x";
  for (int i = 0; i < 12; ++i) {
    const std::string next = i == 11 ? "y" : "t" + std::to_string(i);
    b.node("Add", {prev, "x"}, {next});
    prev = next;
  }
  Session s = session_for(b, "session_lifetime");
  s.run({{"x", floats({1024})}});
  // Each intermediate dies at the next add: two 4 KiB slots alternate.
  CHECK(s.stats().planned_bytes == 2 * 4096);
}

TEST_CASE("session: a steady run allocates no buffers", "[session][memory]") {
  ModelBuilder b;
  b.input("x", kFloat, {-1, 64}).output("y", kFloat, {-1, 64});
  b.node("Add", {"x", "x"}, {"t"});
  b.node("Mul", {"t", "x"}, {"u"});
  b.node("Add", {"u", "t"}, {"y"});
  Session s = session_for(b, "session_steady");
  for (int i = 0; i < 3; ++i) s.run({{"x", floats({8, 64})}});  // outputs released each time
  const Session::Stats warm = s.stats();
  for (int i = 0; i < 20; ++i) {
    auto out = s.run({{"x", floats({8, 64})}});
    CHECK(out[0].data<float>()[1] == 1.f * 2 * 1 + 2);
  }
  CHECK(s.stats().arena_allocations == warm.arena_allocations);
  CHECK(s.stats().output_allocations == warm.output_allocations);
  CHECK(s.stats().plans_built == warm.plans_built);
  // An output the caller keeps (a KV cache fed back) is not overwritten: the
  // next run takes the second buffer.
  auto kept = s.run({{"x", floats({8, 64})}});
  auto next = s.run({{"x", floats({8, 64}, 1)}});
  CHECK(kept[0].raw() != next[0].raw());
  CHECK(kept[0].data<float>()[0] == 0.f);
}

TEST_CASE("session: inputs are checked against the graph", "[session][bad-input]") {
  ModelBuilder b;
  b.input("x", kFloat, {-1, 4}).input("z", kFloat, {-1, 4}).output("y", kFloat, {-1, 4});
  b.node("Add", {"x", "z"}, {"y"});
  Session s = session_for(b, "session_inputs");
  CHECK_THAT(run_error(s, {{"x", floats({2, 4})}}), Catch::Contains("input 'z' was not given"));
  CHECK_THAT(run_error(s, {{"x", floats({2, 4})}, {"z", floats({2, 4})}, {"w", floats({1})}}),
             Catch::Contains("no input 'w'") && Catch::Contains("inputs: x, z"));
  CHECK_THAT(run_error(s, {{"x", int64s({1, 2, 3, 4})}, {"z", floats({2, 4})}}),
             Catch::Contains("'x' is int64") && Catch::Contains("float32"));
  CHECK_THAT(run_error(s, {{"x", floats({8})}, {"z", floats({2, 4})}}), Catch::Contains("rank 1") && Catch::Contains("rank 2"));
  CHECK_THAT(run_error(s, {{"x", floats({2, 5})}, {"z", floats({2, 4})}}),
             Catch::Contains("'x' dim 1 is 5") && Catch::Contains("declares 4"));
  // Both inputs name their first dim 'sym0': they must agree.
  CHECK_THAT(run_error(s, {{"x", floats({2, 4})}, {"z", floats({3, 4})}}), Catch::Contains("'sym0'"));
}

TEST_CASE("session: the pass list can stop after pass N", "[session][passes]") {
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.initializer<float>("c", kFloat, {2}, {1, 2});
  b.node("Add", {"c", "c"}, {"cc"});  // foldable
  b.node("Mul", {"x", "x"}, {"dead"});
  b.node("Add", {"x", "cc"}, {"y"});
  SessionOptions none;
  none.stop_after_pass = 0;
  Session raw = session_for(b, "session_passes_none", none);
  CHECK(raw.graph().nodes.size() == 3);
  SessionOptions one;  // up to and including constant folding
  one.stop_after_pass = test::pass_index("fold-constants") + 1;
  Session folded = session_for(b, "session_passes_one", one);
  CHECK(folded.graph().nodes.size() == 2);  // folding only: the dead Mul stays
  Session all = session_for(b, "session_passes_all");
  CHECK(all.graph().nodes.size() == 1);
  CHECK(all.pass_report().get("folded_nodes") == 1);
  CHECK(all.pass_report().get("dead_nodes") == 1);
  for (Session* s : {&raw, &folded, &all}) {
    auto out = s->run({{"x", floats({2}, 1)}});
    CHECK(out[0].data<float>()[0] == 3.f);
    CHECK(out[0].data<float>()[1] == 6.f);
  }
}

TEST_CASE("session: a contiguous Slice is a view, not a copy", "[session][memory]") {
  // y = Slice(x, [1], [2], axes [0]) + 1 over x [3, 256]: the slice is one
  // contiguous run (a layer of a stacked KV cache), so only y needs a buffer.
  ModelBuilder b;
  b.input("x", kFloat, {3, 256}).output("y", kFloat, {1, 256});
  b.initializer<int64_t>("s", kInt64, {1}, {1});
  b.initializer<int64_t>("e", kInt64, {1}, {2});
  b.initializer<int64_t>("a", kInt64, {1}, {0});
  b.initializer<float>("one", kFloat, {}, {1.f});
  b.node("Slice", {"x", "s", "e", "a"}, {"row"});
  b.node("Add", {"row", "one"}, {"y"});
  Session s = session_for(b, "session_slice_view");
  auto out = s.run({{"x", floats({3, 256})}});
  CHECK(out[0].data<float>()[0] == 257.f);
  CHECK(out[0].data<float>()[255] == 512.f);
  CHECK(s.stats().planned_bytes == 0);  // the slice took no arena slot
}

namespace {

// present = Concat(Unsqueeze(x), Unsqueeze(y), axis) with x = a + b and
// y = a * b, both [2, S, 3]; z = x - y reads x after the Concat.
ModelBuilder stacked(int64_t axis) {
  ModelBuilder b;
  b.input("a", kFloat, {2, -1, 3}).input("b", kFloat, {2, -1, 3});
  b.output("present", kFloat, axis == 0 ? std::vector<int64_t>{2, 2, -1, 3} : std::vector<int64_t>{1, 4, -1, 3});
  b.output("z", kFloat, {2, -1, 3});
  b.initializer<int64_t>("zero", kInt64, {1}, {0});
  b.node("Add", {"a", "b"}, {"x"});
  b.node("Mul", {"a", "b"}, {"y"});
  b.node("Unsqueeze", {"x", "zero"}, {"ux"});
  b.node("Unsqueeze", {"y", "zero"}, {"uy"});
  ModelBuilder::attr_int(b.node("Concat", {"ux", "uy"}, {"present"}), "axis", axis);
  b.node("Sub", {"x", "y"}, {"z"});
  return b;
}

}  // namespace

TEST_CASE("session: a stacking Concat of a graph output is written in place", "[session][memory]") {
  // Axis 0: each input is one contiguous block of `present`, so Add and Mul
  // write into it and the Concat does not run; axis 1 of [1, 4, S, 3] is
  // the same bytes too. Both equal the plain concatenation, over two shapes.
  for (int64_t axis : {0, 1}) {
    Session s = session_for(stacked(axis), "session_stack_" + std::to_string(axis));
    for (int64_t seq : {5, 2}) {
      const Tensor a = floats({2, seq, 3}, 1), b = floats({2, seq, 3}, -4);
      auto out = s.run({{"a", a}, {"b", b}});
      CHECK(s.stats().nodes_run == 5);  // Add, Mul, the two Unsqueeze views and Sub: no Concat
      const int64_t n = 2 * seq * 3;
      REQUIRE(out[0].size() == 2 * n);
      for (int64_t i = 0; i < n; ++i) {
        const float x = a.data<float>()[i] + b.data<float>()[i], y = a.data<float>()[i] * b.data<float>()[i];
        CHECK(out[0].data<float>()[i] == x);
        CHECK(out[0].data<float>()[n + i] == y);
        CHECK(out[1].data<float>()[i] == x - y);
      }
    }
  }
}

TEST_CASE("session: a Concat whose blocks interleave still copies", "[session][memory][must-not-fire]") {
  // Concat along axis 2 of [1, 2, 2S, 3]: the inputs interleave in the output.
  ModelBuilder b;
  b.input("a", kFloat, {2, -1, 3}).input("b", kFloat, {2, -1, 3});
  b.output("present", kFloat, {1, 2, -1, 3});
  b.initializer<int64_t>("zero", kInt64, {1}, {0});
  b.node("Add", {"a", "b"}, {"x"});
  b.node("Mul", {"a", "b"}, {"y"});
  b.node("Unsqueeze", {"x", "zero"}, {"ux"});
  b.node("Unsqueeze", {"y", "zero"}, {"uy"});
  ModelBuilder::attr_int(b.node("Concat", {"ux", "uy"}, {"present"}), "axis", 2);
  Session s = session_for(b, "session_stack_interleaved");
  const Tensor a = floats({2, 3, 3}, 1), bb = floats({2, 3, 3}, -4);
  auto out = s.run({{"a", a}, {"b", bb}});
  CHECK(s.stats().nodes_run == 5);  // Add, Mul, the two Unsqueeze views and the Concat
  // present[0, h, 0:3] = x[h], present[0, h, 3:6] = y[h]
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t t = 0; t < 9; ++t) {
      const int64_t i = h * 9 + t;
      CHECK(out[0].data<float>()[h * 18 + t] == a.data<float>()[i] + bb.data<float>()[i]);
      CHECK(out[0].data<float>()[h * 18 + 9 + t] == a.data<float>()[i] * bb.data<float>()[i]);
    }
}
