// --int8: float MatMuls with constant weights run as dynamic int8. Graphs
// built in code, run with and without the pass: the rewrite fires only on
// constant float32 2-D weights, and its output equals the dynamic-int8
// arithmetic (per-column weight and per-row activation scales of amax/127)
// computed here independently, and stays close to the float result.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1;
constexpr int64_t M = 5, K = 70, N = 33;

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Session make(bool int8, bool weight_is_input, const std::string& name) {
  ModelBuilder b;
  b.input("x", kFloat, {M, K}).output("y", kFloat, {M, N});
  if (weight_is_input) b.input("w", kFloat, {K, N});
  else b.initializer<float>("w", kFloat, {K, N}, random_floats(size_t(K * N), 3));
  b.node("MatMul", {"x", "w"}, {"y"});
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  SessionOptions o;
  o.qd8 = int8;
  return Session(load_onnx(path), default_op_registry(), o);
}

float rne(float v) { return std::nearbyint(v); }

}  // namespace

TEST_CASE("int8 dynamic: a constant float weight runs as int8 with the reference arithmetic", "[fusion][int8]") {
  Session q = make(true, false, "int8_on"), f = make(false, false, "int8_off");
  CHECK(q.pass_report().get("qd8_fused") == 1);
  CHECK(q.graph().nodes[0].op_type == "Qd8MatMul");
  CHECK(f.graph().nodes[0].op_type == "MatMul");
  Tensor x = Tensor::allocate(DType::F32, {M, K});
  const auto xv = random_floats(size_t(M * K), 5);
  std::copy(xv.begin(), xv.end(), x.data<float>());
  const Tensor yq = q.run({{"x", x}})[0], yf = f.run({{"x", x}})[0];

  // Independent reference: quantize per column / per row, exact integer sum.
  const auto w = random_floats(size_t(K * N), 3);
  std::vector<float> ws(N), xs(M);
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[size_t(k * N + n)]));
    ws[size_t(n)] = amax / 127.f;
  }
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(xv[size_t(m * K + k)]));
    xs[size_t(m)] = amax / 127.f;
  }
  double worst_ref = 0, worst_float = 0, scale = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += int64_t(rne(xv[size_t(m * K + k)] / xs[size_t(m)])) * int64_t(rne(w[size_t(k * N + n)] / ws[size_t(n)]));
      const double ref = double(acc) * xs[size_t(m)] * ws[size_t(n)];
      const double got = yq.data<float>()[m * N + n];
      worst_ref = std::max(worst_ref, std::fabs(got - ref) / (std::fabs(ref) + 1e-3));
      worst_float = std::max(worst_float, std::fabs(got - yf.data<float>()[m * N + n]));
      scale = std::max(scale, std::fabs(double(yf.data<float>()[m * N + n])));
    }
  CHECK(worst_ref < 1e-5);            // the same arithmetic, up to the last float rounding
  CHECK(worst_float / scale < 0.05);  // and close to float
}

TEST_CASE("int8 dynamic must not fire on a weight that is not constant", "[fusion][int8][must-not-fire]") {
  Session q = make(true, true, "int8_input_weight");
  CHECK(q.pass_report().get("qd8_fused") == 0);
  CHECK(q.graph().nodes[0].op_type == "MatMul");
}
