// The pass list by name, for tests that compare a graph with and without a
// pass (SessionOptions::stop_after_pass).
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "graph/onnx/onnx_loader.h"
#include "graph/passes/passes.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"

namespace onebit::test {

// The index of the pass named `name` in pass_list(): stop_after_pass set to
// it runs every pass before it and not it. A name not in the list fails the
// test, so a renamed pass cannot turn a with-and-without comparison into a
// comparison of the pass with itself.
inline int pass_index(const char* name) {
  const auto& passes = pass_list();
  for (size_t i = 0; i < passes.size(); ++i)
    if (std::strcmp(passes[i].name, name) == 0) return static_cast<int>(i);
  FAIL("no pass named " << name);
  return -1;
}

// The model `b` describes, saved in a fresh scratch directory `name` and
// opened with the passes before `stop` (-1: every pass).
inline Session session_until(const ModelBuilder& b, const std::string& name, int stop = -1) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  SessionOptions o;
  o.stop_after_pass = stop;
  return Session(load_onnx(path), default_op_registry(), o);
}

}  // namespace onebit::test
