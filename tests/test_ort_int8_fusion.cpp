// onnxruntime's quantize_dynamic graphs onto the qd8 GEMM
// (graph/passes/ort_dynamic_int8.cpp). Graphs built in code, the pattern
// quantize_dynamic writes (DynamicQuantizeLinear → MatMulInteger → Cast →
// Mul by Mul(x_scale, w_scale)) and onnxruntime's MatMulIntegerToFloat, run
// with and without the pass: the fused graph is one Qd8MatMul per MatMul,
// its output equals the qd8 arithmetic on the graph's weight codes
// (per-row activations, computed here independently) and stays close to
// the node-by-node result; cases where it must not fire keep every node.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kUint8 = 2, kInt8 = 3;
constexpr int64_t M = 4, K = 40, N = 24;

struct Weights {
  std::vector<int8_t> q;     // [K, N]
  std::vector<float> scale;  // [N]
};

Weights weights(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-127, 127);
  Weights w;
  for (int64_t i = 0; i < K * N; ++i) w.q.push_back(static_cast<int8_t>(d(rng)));
  for (int64_t j = 0; j < N; ++j) w.scale.push_back(0.001f * static_cast<float>(1 + j % 7));
  return w;
}

std::vector<float> input(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(M * K));
  for (float& x : v) x = d(rng);
  return v;
}

// Initializers "w" [K, N] and "wz" [N]: w's codes as int8 (zero point 0),
// or shifted by 128 into uint8 with zero point `u8_zero`.
void weight_initializers(ModelBuilder& b, const Weights& w, bool u8, uint8_t u8_zero) {
  if (u8) {
    std::vector<uint8_t> u(w.q.size());
    for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(w.q[i] + 128);
    b.initializer<uint8_t>("w", kUint8, {K, N}, u);
    b.initializer<uint8_t>("wz", kUint8, {N}, std::vector<uint8_t>(N, u8_zero));
  } else {
    b.initializer<int8_t>("w", kInt8, {K, N}, w.q);
    b.initializer<int8_t>("wz", kInt8, {N}, std::vector<int8_t>(N, 0));
  }
}

enum class Form { Tail, ToFloat, SharedCast, Uint8ZeroPointZero };

Graph build(Form form, const Weights& w) {
  ModelBuilder b;
  b.input("x", kFloat, {M, K}).output("y", kFloat, {M, N});
  b.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  weight_initializers(b, w, form == Form::Uint8ZeroPointZero, 0);
  b.initializer<float>("ws", kFloat, {N}, w.scale);
  if (form == Form::ToFloat) {
    auto& n = b.node("MatMulIntegerToFloat", {"xq", "w", "xs", "ws", "xz", "wz"}, {"y"});
    n.set_domain("com.microsoft");
    auto* os = b.proto().add_opset_import();
    os->set_domain("com.microsoft");
    os->set_version(1);
  } else {
    b.node("MatMulInteger", {"xq", "w", "xz", "wz"}, {"acc"});
    ModelBuilder::attr_int(b.node("Cast", {"acc"}, {"accf"}), "to", kFloat);
    b.node("Mul", {"xs", "ws"}, {"s"});
    if (form == Form::SharedCast) {
      // The float accumulators are read twice: the pattern must not fire.
      b.output("accf", kFloat, {M, N});
    }
    b.node("Mul", {"accf", "s"}, {"y"});
  }
  const std::string path = scratch_dir("ort_int8") + "/model.onnx";
  b.save(path);
  return load_onnx(path);
}

SessionOptions upto(const char* pass, bool include) {
  SessionOptions o;
  o.stop_after_pass = test::pass_index(pass) + (include ? 1 : 0);
  return o;
}

// Qd8 on the graph's weight codes: x per row amax/127, exact integer sums.
std::vector<double> qd8_reference(const std::vector<float>& x, const Weights& w) {
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t r = 0; r < M; ++r) {
    float amax = 0;
    for (int64_t i = 0; i < K; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * K + i)]));
    const float s = amax / 127.0f;
    for (int64_t j = 0; j < N; ++j) {
      int64_t acc = 0;
      for (int64_t i = 0; i < K; ++i) {
        const int q = static_cast<int>(std::nearbyint(x[static_cast<size_t>(r * K + i)] / s));
        acc += q * w.q[static_cast<size_t>(i * N + j)];
      }
      y[static_cast<size_t>(r * N + j)] = static_cast<double>(acc) * s * w.scale[static_cast<size_t>(j)];
    }
  }
  return y;
}

void check_fires(Form form) {
  const Weights w = weights(3);
  const std::vector<float> xv = input(5);
  Tensor x = Tensor::allocate(DType::F32, {M, K});
  std::copy(xv.begin(), xv.end(), x.data<float>());
  Session fused(build(form, w), default_op_registry());
  Session plain(build(form, w), default_op_registry(), upto("fuse-ort-dynamic-int8", false));
  CHECK(fused.pass_report().get("ort_int8_fused") == 1);
  int qd8 = 0;
  for (const Node& n : fused.graph().nodes) qd8 += n.op_type == "Qd8MatMul";
  CHECK(qd8 == 1);
  CHECK(fused.graph().nodes.size() == 1);  // DynamicQuantizeLinear, MatMulInteger, Cast, Muls all gone
  const Tensor yf = fused.run({{"x", x}})[0], yp = plain.run({{"x", x}})[0];
  const std::vector<double> ref = qd8_reference(xv, w);
  double max_ref = 0, max_plain = 0, scale = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    max_ref = std::max(max_ref, std::fabs(yf.data<float>()[i] - ref[static_cast<size_t>(i)]));
    max_plain = std::max(max_plain, std::fabs(static_cast<double>(yf.data<float>()[i]) - yp.data<float>()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(yp.data<float>()[i])));
  }
  CHECK(max_ref <= 1e-5 * scale);
  // Per-row int8 against the graph's per-tensor uint8 activations: close, not equal.
  CHECK(max_plain <= 0.02 * scale);
}

}  // namespace

TEST_CASE("ort int8: quantize_dynamic's MatMulInteger tail fuses to one Qd8MatMul", "[fusion][ort_int8]") {
  check_fires(Form::Tail);
}

TEST_CASE("ort int8: DynamicQuantizeLinear into MatMulIntegerToFloat fuses to one Qd8MatMul", "[fusion][ort_int8]") {
  check_fires(Form::ToFloat);
}

TEST_CASE("ort int8 must not fire when the accumulators are read elsewhere", "[fusion][ort_int8][must-not-fire]") {
  Session s(build(Form::SharedCast, weights(3)), default_op_registry());
  CHECK(s.pass_report().get("ort_int8_fused") == 0);
  CHECK(s.pass_report().get("ort_int8_refused:intermediate_shared") == 1);
}

TEST_CASE("ort int8 must not fire on uint8 weights with zero point 0", "[fusion][ort_int8][must-not-fire]") {
  Session s(build(Form::Uint8ZeroPointZero, weights(3)), default_op_registry());
  CHECK(s.pass_report().get("ort_int8_fused") == 0);
  CHECK(s.pass_report().get("ort_int8_refused:weight_not_int8") == 1);
  // The nodes run one by one: the graph's own arithmetic.
  Tensor x = Tensor::allocate(DType::F32, {M, K});
  const std::vector<float> xv = input(5);
  std::copy(xv.begin(), xv.end(), x.data<float>());
  CHECK(s.run({{"x", x}})[0].shape() == Shape{M, N});
}

namespace {

// com.microsoft::DynamicQuantizeMatMul(A, B, b_scale, b_zero_point, bias),
// one node: int8 codes with zero point 0, or uint8 codes with zero point
// 128 (the same weight); bias [N].
Graph dynamic_quantize_matmul(const Weights& w, bool u8, const std::vector<float>& bias, bool scale_input = false) {
  ModelBuilder b;
  b.input("x", kFloat, {M, K}).output("y", kFloat, {M, N});
  auto* os = b.proto().add_opset_import();
  os->set_domain("com.microsoft");
  os->set_version(1);
  weight_initializers(b, w, u8, 128);
  if (scale_input) b.input("ws", kFloat, {N});
  else b.initializer<float>("ws", kFloat, {N}, w.scale);
  b.initializer<float>("bias", kFloat, {N}, bias);
  b.node("DynamicQuantizeMatMul", {"x", "w", "ws", "wz", "bias"}, {"y"}).set_domain("com.microsoft");
  const std::string path = scratch_dir("ort_dqmm") + "/model.onnx";
  b.save(path);
  return load_onnx(path);
}

}  // namespace

// onnxruntime quantizes A per tensor to uint8; 1bit runs the node on the
// qd8 GEMM (A per row to int8, as every dynamic int8 MatMul here): the qd8
// arithmetic on B's codes less their zero point, plus the bias, and close
// to quantize_dynamic's node-by-node form of the same weight (per-tensor
// uint8 activations).
TEST_CASE("ort int8: DynamicQuantizeMatMul runs on the qd8 GEMM, int8 or uint8 weights", "[ort_int8]") {
  const Weights w = weights(3);
  const std::vector<float> xv = input(5);
  Tensor x = Tensor::allocate(DType::F32, {M, K});
  std::copy(xv.begin(), xv.end(), x.data<float>());
  std::vector<float> bias(N);
  for (int64_t j = 0; j < N; ++j) bias[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j % 5) - 0.5f;
  const std::vector<double> ref = qd8_reference(xv, w);
  const Tensor yp = Session(build(Form::Tail, w), default_op_registry(), upto("fuse-ort-dynamic-int8", false))
                        .run({{"x", x}})[0];
  for (bool u8 : {false, true}) {
    CAPTURE(u8);
    Session s(dynamic_quantize_matmul(w, u8, bias), default_op_registry());
    REQUIRE(s.graph().nodes.size() == 1);
    CHECK(s.graph().nodes[0].op_type == "DynamicQuantizeMatMul");
    const Tensor y = s.run({{"x", x}})[0];
    REQUIRE(y.shape() == Shape{M, N});
    double max_ref = 0, max_plain = 0, scale = 0;
    for (int64_t i = 0; i < M * N; ++i) {
      const double b = bias[static_cast<size_t>(i % N)];
      max_ref = std::max(max_ref, std::fabs(y.data<float>()[i] - (ref[static_cast<size_t>(i)] + b)));
      max_plain = std::max(max_plain, std::fabs(y.data<float>()[i] - (yp.data<float>()[i] + b)));
      scale = std::max(scale, std::fabs(static_cast<double>(yp.data<float>()[i])));
    }
    CHECK(max_ref <= 1e-5 * scale);
    CHECK(max_plain <= 0.02 * scale);
  }
  // b_scale must be known when the weight is packed.
  CHECK_THROWS_WITH(Session(dynamic_quantize_matmul(w, false, bias, true), default_op_registry()),
                    Catch::Contains("input b_scale must be a constant float32 scalar or [N=24]"));
}
