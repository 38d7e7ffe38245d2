#include <catch2/catch.hpp>

#include "graph/memory_plan.h"

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
