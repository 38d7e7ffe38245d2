// The last-position cut (graph/passes/last_position.cpp): an LM head named in
// SessionOptions::last_position_outputs computes only its last row, equal
// to the last row of the full product; a QDQ group stays fused; must-not-fire
// cases keep the full output.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt8 = 3;
constexpr int64_t kK = 40, kN = 50;

std::vector<float> weights() {
  std::mt19937 rng(3);
  std::vector<float> w(kK * kN);
  for (auto& v : w) v = static_cast<float>(static_cast<int>(rng() % 17) - 8) / 8.f;
  return w;
}

// x [1, S, K] -> Mul (a stand-in for the final norm) -> MatMul(W) -> logits [1, S, N].
// cast: the product goes through a Cast to float32 (an identity here), as
// an export converted to float16 keeping float32 outputs writes it;
// cast_read: the product is also a graph output (a second reader).
ModelBuilder float_head(bool second_reader = false, bool cast = false, bool cast_read = false) {
  ModelBuilder b;
  b.input("x", kFloat, {1, -1, kK}).output("logits", kFloat, {1, -1, kN});
  b.initializer<float>("two", kFloat, {}, {2.f});
  b.initializer<float>("w", kFloat, {kK, kN}, weights());
  b.node("Mul", {"x", "two"}, {"h"}, "norm");
  b.node("MatMul", {"h", "w"}, {cast ? "product" : "logits"}, "lm_head");
  if (cast) ModelBuilder::attr_int(b.node("Cast", {"product"}, {"logits"}, "to_float"), "to", kFloat);
  if (cast_read) b.output("product", kFloat, {1, -1, kN});
  if (second_reader) {
    b.output("probs", kFloat, {1, -1, kN});
    b.node("Softmax", {"logits"}, {"probs"}, "softmax");
  }
  return b;
}

// The A8W8 form: Q(h) -> DQ(scale) -> MatMul <- DQ(w int8), float logits.
ModelBuilder qdq_head(bool per_row_scale) {
  ModelBuilder b;
  b.input("x", kFloat, {1, -1, kK}).output("logits", kFloat, {1, -1, kN});
  b.initializer<float>("s_x", kFloat, {}, {0.05f});
  b.initializer<int8_t>("zp_x", kInt8, {}, {0});
  std::vector<int8_t> wq(kK * kN);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<int8_t>(static_cast<int>(i * 37 % 255) - 127);
  b.initializer<int8_t>("w_q", kInt8, {kK, kN}, wq);
  b.initializer<float>("s_w", kFloat, {}, {0.01f});
  b.initializer<int8_t>("zp_w", kInt8, {}, {0});
  b.node("QuantizeLinear", {"x", "s_x", "zp_x"}, {"x_q"}, "q_x");
  if (per_row_scale) {
    // A run-time scale: not per tensor as far as the cut can tell.
    b.input("s_rt", kFloat, {});
    b.node("DequantizeLinear", {"x_q", "s_rt", "zp_x"}, {"x_dq"}, "dq_x");
  } else {
    b.node("DequantizeLinear", {"x_q", "s_x", "zp_x"}, {"x_dq"}, "dq_x");
  }
  b.node("DequantizeLinear", {"w_q", "s_w", "zp_w"}, {"w_dq"}, "dq_w");
  b.node("MatMul", {"x_dq", "w_dq"}, {"logits"}, "lm_head");
  return b;
}

Session make(const ModelBuilder& b, const std::string& name, bool cut) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  SessionOptions o;
  if (cut) o.last_position_outputs = {"logits"};
  return Session(load_onnx(path), default_op_registry(), o);
}

Tensor x_input(int64_t seq) {
  Tensor x = Tensor::allocate(DType::F32, {1, seq, kK});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(i % 11) / 4.f - 1.25f;
  return x;
}

// The last row of `full` [1, S, N] equals `last` [1, 1, N] exactly: weights
// are multiples of 1/8 and activations of 1/2, so every partial sum is exact
// and the one-row kernel's summation order cannot show.
void check_last_row(const Tensor& full, const Tensor& last) {
  REQUIRE(last.shape() == Shape{1, 1, kN});
  const int64_t s = full.dim(1);
  for (int64_t j = 0; j < kN; ++j) CHECK(last.data<float>()[j] == full.data<float>()[(s - 1) * kN + j]);
}

}  // namespace

TEST_CASE("last position: the LM head computes only the last row", "[fusion][last-position]") {
  Session cut = make(float_head(), "lastpos_float_on", true), full = make(float_head(), "lastpos_float_off", false);
  CHECK(cut.pass_report().get("last_position") == 1);
  CHECK(full.pass_report().get("last_position") == 0);
  for (int64_t seq : {1, 7, 33}) {
    const Tensor a = full.run({{"x", x_input(seq)}})[0];
    REQUIRE(a.shape() == Shape{1, seq, kN});
    check_last_row(a, cut.run({{"x", x_input(seq)}})[0]);
  }
}

TEST_CASE("last position: through a Cast of the product that alone reads it", "[fusion][last-position]") {
  Session cut = make(float_head(false, true), "lastpos_cast_on", true);
  Session full = make(float_head(false, true), "lastpos_cast_off", false);
  CHECK(cut.pass_report().get("last_position") == 1);
  for (int64_t seq : {1, 7}) check_last_row(full.run({{"x", x_input(seq)}})[0], cut.run({{"x", x_input(seq)}})[0]);
  // The product also an output: its every row is wanted, nothing is cut.
  Session read = make(float_head(false, true, true), "lastpos_cast_read", true);
  CHECK(read.pass_report().get("last_position") == 0);
  CHECK(read.run({{"x", x_input(5)}})[0].shape() == Shape{1, 5, kN});
}

TEST_CASE("last position: a QDQ head is cut before its DequantizeLinear and stays fused", "[fusion][last-position]") {
  Session cut = make(qdq_head(false), "lastpos_qdq_on", true), full = make(qdq_head(false), "lastpos_qdq_off", false);
  CHECK(cut.pass_report().get("last_position") == 1);
  CHECK(cut.pass_report().get("qdq_fused") == 1);
  CHECK(full.pass_report().get("qdq_fused") == 1);
  check_last_row(full.run({{"x", x_input(9)}})[0], cut.run({{"x", x_input(9)}})[0]);
}

TEST_CASE("last position must not fire", "[fusion][last-position][must-not-fire]") {
  SECTION("another node reads the logits") {
    Session s = make(float_head(true), "lastpos_reader", true);
    CHECK(s.pass_report().get("last_position") == 0);
    CHECK(s.run({{"x", x_input(5)}})[0].shape() == Shape{1, 5, kN});
  }
  SECTION("the activation's DequantizeLinear has no constant per-tensor scale") {
    Session s = make(qdq_head(true), "lastpos_rt_scale", true);
    CHECK(s.pass_report().get("last_position") == 0);
  }
  SECTION("an output name the graph does not have") {
    ModelBuilder b = float_head();
    const std::string path = scratch_dir("lastpos_missing") + "/model.onnx";
    b.save(path);
    SessionOptions o;
    o.last_position_outputs = {"no_such_output"};
    Session s(load_onnx(path), default_op_registry(), o);
    CHECK(s.pass_report().get("last_position") == 0);
    CHECK(s.run({{"x", x_input(4)}})[0].shape() == Shape{1, 4, kN});
  }
}

TEST_CASE("last position: with a rows input the head keeps the last R rows", "[fusion][last-position][lookup]") {
  // SessionOptions::last_rows_input: the verification pass of lookup
  // decoding reads the logits of 1 + draft positions.
  for (bool qdq : {false, true}) {
    INFO((qdq ? "QDQ head" : "float head"));
    const ModelBuilder b = qdq ? qdq_head(false) : float_head();
    const std::string path = scratch_dir("lastrows") + "/model.onnx";
    b.save(path);
    SessionOptions o;
    o.last_position_outputs = {"logits"};
    o.last_rows_input = true;
    Session rows(load_onnx(path), default_op_registry(), o);
    Session full = make(b, "lastrows_full", false);
    CHECK(rows.pass_report().get("last_rows") == 1);
    const auto names = rows.input_names();
    CHECK(std::find(names.begin(), names.end(), kLastRowsInput) != names.end());
    for (auto [seq, r] : {std::pair{int64_t{1}, int64_t{1}}, {7, 1}, {7, 3}, {9, 9}}) {
      INFO("S " << seq << ", rows " << r);
      const Tensor a = full.run({{"x", x_input(seq)}})[0];
      const Tensor c = rows.run({{"x", x_input(seq)}, {kLastRowsInput, Tensor(DType::I64, {r}, nullptr)}})[0];
      REQUIRE(c.shape() == Shape{1, r, kN});
      CHECK(std::memcmp(c.data<float>(), a.data<float>() + (seq - r) * kN, static_cast<size_t>(r * kN) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("last position: a graph with its own value of the rows input's name keeps one row", "[fusion][last-position][lookup]") {
  ModelBuilder b = float_head();
  b.initializer<float>(kLastRowsInput, kFloat, {}, {1.f});  // a value the graph names so itself
  const std::string path = scratch_dir("lastrows_taken") + "/model.onnx";
  b.save(path);
  SessionOptions o;
  o.last_position_outputs = {"logits"};
  o.last_rows_input = true;
  Session s(load_onnx(path), default_op_registry(), o);
  CHECK(s.pass_report().get("last_position") == 1);
  CHECK(s.pass_report().get("last_rows") == 0);
  CHECK(s.pass_report().get("last_rows_refused:name_taken") == 1);
  CHECK(s.run({{"x", x_input(5)}})[0].shape() == Shape{1, 1, kN});
}
