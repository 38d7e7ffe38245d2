// A session keeps a plan per input-shape signature and switches between
// them (prefill, decode, prefill again); kernel reshape runs while a plan is
// built. So a kernel must take what run needs from the shapes it runs on,
// not from members reshape set: those belong to whichever plan was built
// last. Each case runs shapes A, B, then A again and wants A's first
// result bit for bit.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1;
constexpr int64_t kHidden = 8;

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::allocate(DType::F32, shape);
  std::mt19937 g(seed);
  std::normal_distribution<float> n;
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = n(g);
  return t;
}

// Runs [1, 3, H], [1, 1, H], [1, 3, H] through `model` (inputs named in
// `names`, each that shape) and checks the third result equals the first.
void check_alternating(const std::string& model, const std::vector<std::string>& names) {
  Session s(load_onnx(model), default_op_registry());
  const auto run = [&](int64_t rows, uint32_t seed) {
    std::vector<NamedTensor> in;
    for (size_t i = 0; i < names.size(); ++i)
      in.push_back({names[i], random_tensor({1, rows, kHidden}, seed + static_cast<uint32_t>(i))});
    return s.run(in);
  };
  const auto first = run(3, 1);
  (void)run(1, 7);
  const auto again = run(3, 1);
  REQUIRE(first.size() == again.size());
  for (size_t o = 0; o < first.size(); ++o) {
    REQUIRE(first[o].shape() == again[o].shape());
    CHECK(std::memcmp(first[o].raw(), again[o].raw(), first[o].bytes()) == 0);
  }
}

}  // namespace

TEST_CASE("plans alternate: SkipSimplifiedLayerNormalization reads its skip rows from the run", "[session][genai]") {
  ModelBuilder b;
  auto* ms = b.proto().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  b.input("x", kFloat, {1, -1, kHidden}).input("skip", kFloat, {1, -1, kHidden}).output("y", kFloat, {1, -1, kHidden});
  std::vector<float> gamma(kHidden, 1.5f);
  b.initializer<float>("gamma", kFloat, {kHidden}, gamma);
  b.node("SkipSimplifiedLayerNormalization", {"x", "skip", "gamma"}, {"y"}).set_domain("com.microsoft");
  const std::string path = scratch_dir("plan_state_skip") + "/model.onnx";
  b.save(path);
  check_alternating(path, {"x", "skip"});
}

TEST_CASE("plans alternate: normalizations over several axes size their rows from the run", "[session]") {
  // axis 1: each row is [S, H], so its size differs between the plans.
  // SimplifiedLayerNormalization's scale has the row's size: an input here.
  ModelBuilder a(23);
  a.input("x", kFloat, {1, -1, kHidden}).input("scale", kFloat, {1, -1, kHidden}).output("y", kFloat, {1, -1, kHidden});
  ModelBuilder::attr_int(a.node("SimplifiedLayerNormalization", {"x", "scale"}, {"y"}), "axis", 1);
  const std::string simplified = scratch_dir("plan_state_simplified") + "/model.onnx";
  a.save(simplified);
  check_alternating(simplified, {"x", "scale"});
  // RMSNormalization's scale broadcasts: a constant [H].
  ModelBuilder b(23);
  b.input("x", kFloat, {1, -1, kHidden}).output("y", kFloat, {1, -1, kHidden});
  b.initializer<float>("scale", kFloat, {kHidden}, std::vector<float>(kHidden, 0.5f));
  ModelBuilder::attr_int(b.node("RMSNormalization", {"x", "scale"}, {"y"}), "axis", 1);
  const std::string rms = scratch_dir("plan_state_rms") + "/model.onnx";
  b.save(rms);
  check_alternating(rms, {"x"});
}

// Transpose moving only axes of size 1 keeps every element in place: the
// plan makes its output a view of the input (no arena slot, no copy); one
// that moves a longer axis copies. Alternating the two, each result equals
// the transposition computed here.
TEST_CASE("plans alternate: a Transpose of size-1 axes is a view, a real one a copy", "[session]") {
  ModelBuilder b;
  b.input("x", kFloat, {1, -1, 2, kHidden}).output("y", kFloat, {1, 2, -1, kHidden});
  auto& t = b.node("Transpose", {"x"}, {"t"});
  ModelBuilder::attr_ints(t, "perm", {0, 2, 1, 3});
  b.node("Add", {"t", "t"}, {"y"});
  const std::string path = scratch_dir("plan_state_transpose") + "/model.onnx";
  b.save(path);
  Session s(load_onnx(path), default_op_registry());
  for (int64_t rows : {3, 1, 3, 1}) {
    INFO("rows " << rows);
    const Tensor x = random_tensor({1, rows, 2, kHidden}, static_cast<uint32_t>(rows));
    const auto y = s.run({{"x", x}});
    REQUIRE(y[0].shape() == Shape{1, 2, rows, kHidden});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < kHidden; ++i) {
          const float v = x.data<float>()[(r * 2 + h) * kHidden + i];
          REQUIRE(y[0].data<float>()[(h * rows + r) * kHidden + i] == v + v);
        }
    const size_t t_bytes = static_cast<size_t>(rows * 2 * kHidden) * sizeof(float);
    if (rows == 1) CHECK(s.stats().planned_bytes < t_bytes);  // the view: t has no slot of its own
    else CHECK(s.stats().planned_bytes >= t_bytes);
  }
}
