// MatMul(x, Transpose(W)) with a constant W becomes com.onebit::MatMul with
// transB (no folded copy of W), and packed weights are released. Run with
// and without the pass; outputs identical; must-not-fire cases.
#include <catch2/catch.hpp>

#include <random>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::session_until;

namespace {

constexpr int32_t kFloat = 1;

ModelBuilder tied(std::vector<int64_t> perm, bool embedding_reader) {
  ModelBuilder b;
  b.input("x", kFloat, {3, 40}).output("y", kFloat, {3, 50});
  std::mt19937 rng(1);
  std::vector<float> w(50 * 40);
  for (auto& v : w) v = static_cast<float>(static_cast<int>(rng() % 17) - 8) / 8.f;
  b.initializer<float>("table", kFloat, {50, 40}, w);  // [N, K], as an embedding table
  ModelBuilder::attr_ints(b.node("Transpose", {"table"}, {"table_t"}, "t"), "perm", perm);
  b.node("MatMul", {"x", "table_t"}, {"y"}, "lm_head");
  if (embedding_reader) {
    b.input("ids", 7, {2});
    b.output("emb", kFloat, {2, 40});
    b.node("Gather", {"table", "ids"}, {"emb"}, "embed");
  }
  return b;
}

Tensor x_input() {
  Tensor x = Tensor::allocate(DType::F32, {3, 40});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  return x;
}

}  // namespace

TEST_CASE("matmul transpose: a transposed constant weight is packed in place", "[fusion][matmul]") {
  Session fused = session_until(tied({1, 0}, false), "mmt_on"), plain = session_until(tied({1, 0}, false), "mmt_off", 0);
  CHECK(fused.pass_report().get("matmul_transpose_fused") == 1);
  REQUIRE(fused.graph().nodes.size() == 1);
  CHECK(fused.graph().nodes[0].domain == "com.onebit");
  CHECK(plain.graph().nodes.size() == 2);
  // The table's only reader packed it, so it was released.
  CHECK(fused.stats().released_bytes == 50 * 40 * 4);
  const Tensor a = fused.run({{"x", x_input()}})[0], b = plain.run({{"x", x_input()}})[0];
  for (int64_t i = 0; i < a.size(); ++i) CHECK(a.data<float>()[i] == b.data<float>()[i]);
}

TEST_CASE("matmul transpose: a table the embedding also reads is kept", "[fusion][matmul]") {
  Session s = session_until(tied({1, 0}, true), "mmt_tied");
  CHECK(s.pass_report().get("matmul_transpose_fused") == 1);
  CHECK(s.stats().released_bytes == 0);
  Tensor ids = Tensor::allocate(DType::I64, {2});
  ids.data<int64_t>()[1] = 49;
  auto out = s.run({{"x", x_input()}, {"ids", ids}});
  CHECK(out[1].shape() == Shape{2, 40});
  // The LM head reads the kept table in place (no packed second copy) and
  // computes what the graph without the pass does (the products and sums of
  // these eighths are exact, so in any order).
  Session plain = session_until(tied({1, 0}, true), "mmt_tied_off", 0);
  const auto want = plain.run({{"x", x_input()}, {"ids", ids}});
  REQUIRE(out[0].shape() == Shape{3, 50});
  for (int64_t i = 0; i < out[0].size(); ++i) CHECK(out[0].data<float>()[i] == want[0].data<float>()[i]);
  for (int rows : {1, 5, 9}) {  // row counts around the dot kernel's 4
    ModelBuilder b;
    b.input("x", kFloat, {rows, 40}).output("y", kFloat, {rows, 50});
    b.input("ids", 7, {2}).output("emb", kFloat, {2, 40});
    std::vector<float> w(50 * 40);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i % 13) - 6) / 4.f;
    b.initializer<float>("table", kFloat, {50, 40}, w);
    ModelBuilder::attr_ints(b.node("Transpose", {"table"}, {"table_t"}, "t"), "perm", {1, 0});
    b.node("MatMul", {"x", "table_t"}, {"y"}, "lm_head");
    b.node("Gather", {"table", "ids"}, {"emb"}, "embed");
    Session on = session_until(b, "mmt_tied_rows"), off = session_until(b, "mmt_tied_rows_off", 0);
    Tensor x = Tensor::allocate(DType::F32, {rows, 40});
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(i % 5) - 2.f;
    const auto got = on.run({{"x", x}, {"ids", ids}}), ref = off.run({{"x", x}, {"ids", ids}});
    INFO("rows " << rows);
    for (int64_t i = 0; i < got[0].size(); ++i) CHECK(got[0].data<float>()[i] == ref[0].data<float>()[i]);
  }
}

TEST_CASE("matmul transpose must not fire on other permutations", "[fusion][matmul][must-not-fire]") {
  ModelBuilder b;
  b.input("x", kFloat, {2, 3, 4}).output("y", kFloat, {2, 3, 3});
  b.initializer<float>("w", kFloat, {2, 3, 4}, std::vector<float>(24, 0.5f));
  ModelBuilder::attr_ints(b.node("Transpose", {"w"}, {"wt"}, "t"), "perm", {0, 2, 1});
  b.node("MatMul", {"x", "wt"}, {"y"});
  Session s = session_until(b, "mmt_perm");
  CHECK(s.pass_report().get("matmul_transpose_fused") == 0);
}
