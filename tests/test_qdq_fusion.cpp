// The QDQ-group fusion: graphs built in code, run with and without the pass;
// outputs must be identical (scales are powers of two, so the unfused float
// path is exact too and any difference is a bug, not rounding), node counts
// are asserted, and the groups that must not fuse do not.
#include <catch2/catch.hpp>

#include <random>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kUint8 = 2, kInt8 = 3;

struct Case {
  int64_t m = 8, k = 16, n = 6;
  int32_t x_type = kInt8;
  bool x_per_row = false, w_per_col = false, with_q = true, x_scale_along_k = false, zero_points = true;
};

std::vector<float> pow2_scales(size_t count, int seed) {
  std::vector<float> s(count);
  for (size_t i = 0; i < count; ++i) s[i] = std::ldexp(1.0f, -2 - static_cast<int>((i + static_cast<size_t>(seed)) % 4));
  return s;
}

ModelBuilder build(const Case& c) {
  ModelBuilder b;
  b.input("x_q", c.x_type, {c.m, c.k});
  b.output(c.with_q ? "y_q" : "y", c.with_q ? kInt8 : kFloat, {c.m, c.n});
  std::mt19937 rng(7);
  std::vector<int8_t> w(static_cast<size_t>(c.k * c.n));
  for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  b.initializer<int8_t>("w_q", kInt8, {c.k, c.n}, w);

  const size_t xs = c.x_per_row ? size_t(c.m) : c.x_scale_along_k ? size_t(c.k) : 1;
  const size_t ws = c.w_per_col ? size_t(c.n) : 1;
  const std::vector<int64_t> xdims = xs == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(xs)};
  const std::vector<int64_t> wdims = ws == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(ws)};
  b.initializer<float>("x_scale", kFloat, xdims, pow2_scales(xs, 0));
  b.initializer<float>("w_scale", kFloat, wdims, pow2_scales(ws, 1));
  std::vector<std::string> dqx = {"x_q", "x_scale"}, dqw = {"w_q", "w_scale"};
  if (c.zero_points) {
    if (c.x_type == kInt8) {
      std::vector<int8_t> zx(xs);
      for (size_t i = 0; i < xs; ++i) zx[i] = static_cast<int8_t>(-40 + int(i) * 3);
      b.initializer<int8_t>("x_zp", kInt8, xdims, zx);
    } else {
      std::vector<uint8_t> zx(xs);
      for (size_t i = 0; i < xs; ++i) zx[i] = static_cast<uint8_t>(120 + i);
      b.initializer<uint8_t>("x_zp", kUint8, xdims, zx);
    }
    std::vector<int8_t> zw(ws);
    for (size_t i = 0; i < ws; ++i) zw[i] = static_cast<int8_t>(-25 + int(i));
    b.initializer<int8_t>("w_zp", kInt8, wdims, zw);
    dqx.push_back("x_zp");
    dqw.push_back("w_zp");
  }
  auto& nx = b.node("DequantizeLinear", dqx, {"x_dq"}, "dq_x");
  if (xs > 1) ModelBuilder::attr_int(nx, "axis", c.x_per_row ? 0 : 1);
  auto& nw = b.node("DequantizeLinear", dqw, {"w_dq"}, "dq_w");
  if (ws > 1) ModelBuilder::attr_int(nw, "axis", 1);
  b.node("MatMul", {"x_dq", "w_dq"}, {"y"}, "matmul");
  if (c.with_q) {
    b.initializer<float>("y_scale", kFloat, {}, {4.0f});
    b.initializer<int8_t>("y_zp", kInt8, {}, {-7});
    b.node("QuantizeLinear", {"y", "y_scale", "y_zp"}, {"y_q"}, "q_y");
  }
  return b;
}

Tensor input(const Case& c) {
  Tensor t = Tensor::allocate(c.x_type == kInt8 ? DType::I8 : DType::U8, {c.m, c.k});
  std::mt19937 rng(11);
  for (int64_t i = 0; i < t.size(); ++i) static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(rng());
  return t;
}

struct Outcome {
  Tensor y;
  size_t nodes;
  int64_t fused, refused;
};

Outcome run(const Case& c, bool fuse, const std::string& name) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  build(c).save(path);
  SessionOptions opts;
  opts.qdq_fusion = fuse;
  Session s(load_onnx(path), default_op_registry(), opts);
  auto out = s.run({{"x_q", input(c)}});
  return {out[0], s.graph().nodes.size(), s.pass_report().get("qdq_fused"), s.pass_report().get("qdq_refused")};
}

void check_same(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.shape() == b.shape());
  int64_t differ = 0;
  for (size_t i = 0; i < a.bytes(); ++i)
    differ += static_cast<const uint8_t*>(a.raw())[i] != static_cast<const uint8_t*>(b.raw())[i];
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("qdq fusion: per tensor with QuantizeLinear becomes one node", "[fusion][qdq]") {
  Case c;
  const Outcome fused = run(c, true, "qdq_pt_on"), plain = run(c, false, "qdq_pt_off");
  CHECK(fused.fused == 1);
  CHECK(fused.nodes == 1);  // both DequantizeLinear died, the Q was folded in
  CHECK(plain.nodes == 4);
  CHECK(plain.fused == 0);
  check_same(fused.y, plain.y);
}

TEST_CASE("qdq fusion: per-axis scales and zero points, float output", "[fusion][qdq]") {
  Case c;
  c.x_per_row = true;
  c.w_per_col = true;
  c.with_q = false;
  const Outcome fused = run(c, true, "qdq_axis_on"), plain = run(c, false, "qdq_axis_off");
  CHECK(fused.nodes == 1);
  check_same(fused.y, plain.y);
}

TEST_CASE("qdq fusion: uint8 activations, symmetric weights", "[fusion][qdq]") {
  Case c;
  c.x_type = kUint8;
  c.k = 67;  // not a multiple of any tile
  c.n = 37;
  c.m = 3;
  const Outcome fused = run(c, true, "qdq_u8_on"), plain = run(c, false, "qdq_u8_off");
  CHECK(fused.nodes == 1);
  check_same(fused.y, plain.y);
}

TEST_CASE("qdq fusion must not fire: activation scale along K", "[fusion][qdq][must-not-fire]") {
  Case c;
  c.x_scale_along_k = true;
  const Outcome fused = run(c, true, "qdq_k_on"), plain = run(c, false, "qdq_k_off");
  CHECK(fused.fused == 0);
  CHECK(fused.refused == 1);
  CHECK(fused.nodes == 4);
  check_same(fused.y, plain.y);
}

TEST_CASE("qdq fusion must not fire: a float MatMul is not a group", "[fusion][qdq][must-not-fire]") {
  ModelBuilder b;
  b.input("x", kFloat, {2, 3}).output("y", kFloat, {2, 4});
  b.initializer<float>("w", kFloat, {3, 4}, std::vector<float>(12, 0.5f));
  b.node("MatMul", {"x", "w"}, {"y"});
  const std::string path = scratch_dir("qdq_float") + "/model.onnx";
  b.save(path);
  Session s(load_onnx(path), default_op_registry());
  CHECK(s.pass_report().get("qdq_fused") == 0);
  CHECK(s.pass_report().get("qdq_refused") == 0);
}
