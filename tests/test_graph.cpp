#include <catch2/catch.hpp>

#include "graph/kernel.h"
#include "graph/memory_plan.h"
#include "graph/tensor.h"

using namespace onebit;

TEST_CASE("memory planner reuses released space", "[graph]") {
  MemoryPlanner p;
  const size_t a = p.allocate(100);
  const size_t b = p.allocate(200);
  p.release(a, 100);
  const size_t c = p.allocate(64);
  CHECK(c == a);
  CHECK(b == 128);
  CHECK(p.high_water() == 128 + 256);
}

// The planner reshapes node after node with one context (Planner::
// reshape_node): start() must leave nothing of the node before — inputs,
// planned outputs, views, held state, workspace, values asked for.
TEST_CASE("reshape context: start() leaves nothing of the node before", "[graph]") {
  const Shape a{2, 3}, b{4};
  const Tensor known = Tensor::allocate(DType::I64, {1});
  ReshapeContext rc;
  rc.start(3, 2);
  rc.input_slot(0) = {DType::F32, &a, nullptr, true};
  rc.input_slot(2) = {DType::I64, &b, &known, true};
  rc.set_present(1, false);
  CHECK(rc.num_inputs() == 3);
  CHECK(rc.has_input(0));
  CHECK_FALSE(rc.has_input(1));
  CHECK(rc.shape(0) == a);
  CHECK(rc.rank(2) == 1);
  CHECK(&rc.value(2) == &known);
  CHECK_FALSE(rc.has_output(1));
  rc.alias_output(0, 0, {6}, 8);
  rc.hold_output(1, DType::F16, {1, 2, 3});
  rc.set_workspace(4096);
  CHECK(rc.data_read() == (uint64_t{1} << 2));
  CHECK(rc.outputs()[0].alias_of == 0);
  CHECK(rc.outputs()[1].held);

  rc.start(1, 3);
  CHECK(rc.num_inputs() == 1);
  CHECK_FALSE(rc.has_input(0));  // every input absent until filled
  CHECK_THROWS_WITH(rc.shape(0), Catch::Contains("input 0 is required but missing"));
  CHECK(rc.num_outputs() == 3);
  for (int o = 0; o < 3; ++o) {
    INFO("output " << o);
    CHECK(rc.has_output(o));
    const OutputPlan& op = rc.outputs()[static_cast<size_t>(o)];
    CHECK_FALSE(op.set);
    CHECK_FALSE(op.held);
    CHECK(op.alias_of == -1);
    CHECK(op.alias_offset == 0);
    CHECK(op.dtype == DType::Undefined);
    CHECK(op.shape.empty());
  }
  CHECK(rc.workspace() == 0);
  CHECK(rc.data_read() == 0);
}
