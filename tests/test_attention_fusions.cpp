// The decoder-layer fusions (RMSNorm, rotary, GQA products): each pattern
// built in code as transformers exports it, run with and without the pass.
// RMSNorm and rotary replay the unfused float operations in order, so their
// outputs must be bit-identical; the GQA products sum the same terms through
// one GEMM per KV head and are compared to a tight tolerance. Must-not-fire
// cases for each.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "graph/onnx/onnx_loader.h"
#include "base/thread_pool.h"
#include "graph/passes/passes.h"
#include "graph/session.h"
#include "model_builder.h"
#include "op_test_util.h"
#include "pass_test_util.h"
#include "repeat_kv_util.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7;

std::vector<float> randoms(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor tensor(Shape shape, unsigned seed) {
  Tensor t = Tensor::allocate(DType::F32, shape);
  const auto v = randoms(static_cast<size_t>(t.size()), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

struct Pair {
  Tensor fused, plain;
  int64_t count;
  size_t fused_nodes, plain_nodes;
};

Pair run_both(const ModelBuilder& b, const std::string& name, const char* pass, const char* counter,
              const std::vector<NamedTensor>& inputs) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  Session fused(load_onnx(path), default_op_registry());
  SessionOptions o;
  o.stop_after_pass = test::pass_index(pass);
  Session plain(load_onnx(path), default_op_registry(), o);
  return {fused.run(inputs)[0], plain.run(inputs)[0], fused.pass_report().get(counter), fused.graph().nodes.size(),
          plain.graph().nodes.size()};
}

// Bit for bit (-0 is not +0); NaNs of any payload count as the same.
void bit_identical(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  int64_t differ = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    differ += std::memcmp(&x, &y, sizeof x) != 0 && !(std::isnan(x) && std::isnan(y));
  }
  CHECK(differ == 0);
}

// The largest |a - b| over two float32 tensors of one shape; infinite
// where one is NaN and the other not.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const float x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    const double diff = std::fabs(double(x) - double(y));
    if (!(diff <= worst)) worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
  }
  return worst;
}

// One session with and one without a pass, agreeing within 1e-5 at each
// (new tokens, past) length: a prompt, then decode steps.
template <class Inputs>
void agree_at_lengths(Session& fused, Session& plain, const std::vector<std::pair<int64_t, int64_t>>& lengths,
                      const Inputs& inputs) {
  for (const auto& [s, past] : lengths) {
    CAPTURE(s, past);
    const std::vector<NamedTensor> in = inputs(s, past);
    CHECK(max_abs_diff(fused.run(in)[0], plain.run(in)[0]) < 1e-5);
  }
}

ModelBuilder rms_norm(bool with_pow2) {  // else Pow(x, 4): not an RMSNorm
  ModelBuilder b;
  b.input("x", kFloat, {2, 5, 96}).output("y", kFloat, {2, 5, 96});
  b.initializer<float>("two", kFloat, {}, {with_pow2 ? 2.f : 4.f});
  b.initializer<int64_t>("axes", kInt64, {1}, {-1});
  b.initializer<float>("eps", kFloat, {}, {1e-6f});
  b.initializer<float>("w", kFloat, {96}, randoms(96, 9));
  b.node("Pow", {"x", "two"}, {"sq"});
  ModelBuilder::attr_int(b.node("ReduceMean", {"sq", "axes"}, {"mean"}), "keepdims", 1);
  b.node("Add", {"mean", "eps"}, {"var"});
  b.node("Sqrt", {"var"}, {"std"});
  b.node("Reciprocal", {"std"}, {"inv"});
  b.node("Mul", {"x", "inv"}, {"xn"});
  b.node("Mul", {"w", "xn"}, {"y"});
  return b;
}

// A float16 export's norm: Cast to float, the chain, Cast to float16, Mul
// by a float16 weight. x_dtype float: the source is no float16 value (the
// fused kernel reads the value before the Cast), so it must not fire.
// converted: that export converted to float16 afterwards (onnxruntime's
// convert_float_to_float16, transformers.js' model_fp16.onnx): the chain's
// constants float16 and both Casts to float16.
ModelBuilder rms_norm_f16(int32_t x_dtype, bool converted = false, float epsilon = 1e-5f) {
  constexpr int32_t kHalf = 10;
  ModelBuilder b;
  b.input("x", x_dtype, {2, 5, 96}).output("y", kHalf, {2, 5, 96});
  if (converted) {
    b.initializer<uint16_t>("two", kHalf, {}, {float_to_half(2.f)});
    b.initializer<uint16_t>("eps", kHalf, {}, {float_to_half(epsilon)});
  } else {
    b.initializer<float>("two", kFloat, {}, {2.f});
    b.initializer<float>("eps", kFloat, {}, {epsilon});
  }
  b.initializer<int64_t>("axes", kInt64, {1}, {-1});
  std::vector<uint16_t> w;
  for (float v : randoms(96, 9)) w.push_back(float_to_half(v));
  b.initializer<uint16_t>("w", kHalf, {96}, w);
  ModelBuilder::attr_int(b.node("Cast", {"x"}, {"xf"}), "to", converted ? kHalf : kFloat);
  b.node("Pow", {"xf", "two"}, {"sq"});
  ModelBuilder::attr_int(b.node("ReduceMean", {"sq", "axes"}, {"mean"}), "keepdims", 1);
  b.node("Add", {"mean", "eps"}, {"var"});
  b.node("Sqrt", {"var"}, {"std"});
  b.node("Reciprocal", {"std"}, {"inv"});
  b.node("Mul", {"xf", "inv"}, {"xn"});
  ModelBuilder::attr_int(b.node("Cast", {"xn"}, {"xh"}), "to", kHalf);
  b.node("Mul", {"w", "xh"}, {"y"});
  return b;
}

Tensor half_tensor(Shape shape, unsigned seed, float scale = 1.f) {
  Tensor t = Tensor::allocate(DType::F16, shape);
  const auto v = randoms(static_cast<size_t>(t.size()), seed);
  for (size_t i = 0; i < v.size(); ++i) t.data<uint16_t>()[i] = float_to_half(scale * v[i]);
  return t;
}

// swapped: Concat(lo, -hi), which rotates the other way and is not rotate_half.
ModelBuilder rotary(int64_t half, bool swapped, int32_t dtype = kFloat) {
  const int64_t d = 2 * half;
  ModelBuilder b;
  b.input("x", dtype, {1, 4, 3, d}).input("cos", dtype, {1, 1, 3, d}).input("sin", dtype, {1, 1, 3, d});
  b.output("y", dtype, {1, 4, 3, d});
  b.initializer<int64_t>("zero", kInt64, {1}, {0});
  b.initializer<int64_t>("h", kInt64, {1}, {half});
  b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
  b.initializer<int64_t>("last", kInt64, {1}, {-1});
  b.initializer<int64_t>("one", kInt64, {1}, {1});
  b.node("Mul", {"x", "cos"}, {"a"});
  b.node("Slice", {"x", "zero", "h", "last", "one"}, {"lo"});
  b.node("Slice", {"x", "h", "big", "last", "one"}, {"hi"});
  b.node("Neg", {"hi"}, {"nhi"});
  ModelBuilder::attr_int(b.node("Concat", swapped ? std::vector<std::string>{"lo", "nhi"} : std::vector<std::string>{"nhi", "lo"},
                                {"rot"}), "axis", -1);
  b.node("Mul", {"rot", "sin"}, {"bb"});
  b.node("Add", {"a", "bb"}, {"y"});
  return b;
}

// repeat_kv then the product: K/V [1,kvh,T,d] repeated to h heads.
ModelBuilder gqa(bool qk, int64_t kvh, int64_t rep, int64_t s, int64_t t, int64_t d, int64_t unsqueeze_axis = 2) {
  const int64_t h = kvh * rep;
  ModelBuilder b;
  b.input("a", kFloat, {1, h, s, qk ? d : t}).input("kv", kFloat, {1, kvh, t, d});
  b.output("y", kFloat, {1, h, s, qk ? t : d});
  b.initializer<int64_t>("ax", kInt64, {1}, {unsqueeze_axis});
  b.initializer<int64_t>("e", kInt64, {5}, {1, kvh, rep, t, d});
  b.initializer<int64_t>("r", kInt64, {4}, {1, h, t, d});
  b.node("Unsqueeze", {"kv", "ax"}, {"u"});
  b.node("Expand", {"u", "e"}, {"ex"});
  ModelBuilder::attr_int(b.node("Reshape", {"ex", "r"}, {"rep"}), "allowzero", 1);
  if (qk) {
    ModelBuilder::attr_ints(b.node("Transpose", {"rep"}, {"kt"}), "perm", {0, 1, 3, 2});
    b.node("MatMul", {"a", "kt"}, {"y"});
  } else {
    b.node("MatMul", {"a", "rep"}, {"y"});
  }
  return b;
}

}  // namespace

TEST_CASE("rms norm fusion: seven nodes become one, bit-identical", "[fusion][rmsnorm]") {
  const Pair p = run_both(rms_norm(true), "rms_on", "fuse-rms-norm", "rms_norm_fused", {{"x", tensor({2, 5, 96}, 1)}});
  CHECK(p.count == 1);
  CHECK(p.fused_nodes == 1);
  CHECK(p.plain_nodes == 7);
  bit_identical(p.fused, p.plain);
}

TEST_CASE("rms norm fusion must not fire on Pow(x, 4)", "[fusion][rmsnorm][must-not-fire]") {
  const Pair p = run_both(rms_norm(false), "rms_pow3", "fuse-rms-norm", "rms_norm_fused", {{"x", tensor({2, 5, 96}, 1)}});
  CHECK(p.count == 0);
  bit_identical(p.fused, p.plain);
}

TEST_CASE("rms norm fusion on float16: nine nodes become one, each rounding as the nodes round, bit-identical",
          "[fusion][rmsnorm]") {
  for (float scale : {1.f, 300.f, 1e-3f}) {  // rows whose squares reach float16's range, and tiny rows
    INFO("x scale " << scale);
    const Pair p = run_both(rms_norm_f16(10), "rms_f16", "fuse-rms-norm", "rms_norm_fused",
                            {{"x", half_tensor({2, 5, 96}, 1, scale)}});
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 1);
    CHECK(p.plain_nodes == 9);
    REQUIRE(p.fused.dtype() == DType::F16);
    REQUIRE(p.fused.shape() == p.plain.shape());
    CHECK(std::memcmp(p.fused.raw(), p.plain.raw(), p.fused.bytes()) == 0);
  }
}

TEST_CASE("rms norm fusion on a chain converted to float16: computed in float32 as onnxruntime computes it",
          "[fusion][rmsnorm]") {
  // The same fused node as the float16 export's form (bit for bit its
  // output), which onnxruntime's computation is: it runs these ops in
  // float32. The float16 nodes one by one square 300 past float16's range.
  for (float scale : {1.f, 300.f, 1e-3f}) {
    INFO("x scale " << scale);
    const std::vector<NamedTensor> in{{"x", half_tensor({2, 5, 96}, 1, scale)}};
    const Pair p = run_both(rms_norm_f16(10, true), "rms_f16_converted", "fuse-rms-norm", "rms_norm_fused", in);
    // The Cast form with the converted chain's epsilon: 1e-5 rounded to float16.
    const Pair cast_form = run_both(rms_norm_f16(10, false, half_to_float(float_to_half(1e-5f))), "rms_f16",
                                    "fuse-rms-norm", "rms_norm_fused", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 1);
    REQUIRE(p.fused.dtype() == DType::F16);
    CHECK(std::memcmp(p.fused.raw(), cast_form.fused.raw(), p.fused.bytes()) == 0);
    int64_t finite = 0, plain_finite_nonzero = 0;
    for (int64_t i = 0; i < p.fused.size(); ++i) {
      const float f = half_to_float(p.fused.data<uint16_t>()[i]), u = half_to_float(p.plain.data<uint16_t>()[i]);
      finite += std::isfinite(f);
      plain_finite_nonzero += std::isfinite(u) && u != 0.f;
    }
    CHECK(finite == p.fused.size());
    if (scale == 300.f) CHECK(plain_finite_nonzero < p.plain.size() / 2);  // the overflow the fused node avoids
  }
}

TEST_CASE("rms norm fusion must not fire on the float16 form when x is no float16 value",
          "[fusion][rmsnorm][must-not-fire]") {
  const Pair p = run_both(rms_norm_f16(kFloat), "rms_f16_from_f32", "fuse-rms-norm", "rms_norm_fused",
                          {{"x", tensor({2, 5, 96}, 1)}});
  CHECK(p.count == 0);
  REQUIRE(p.fused.dtype() == DType::F16);
  CHECK(std::memcmp(p.fused.raw(), p.plain.raw(), p.fused.bytes()) == 0);
}

// torch.onnx's TorchScript exporter: no dtypes between input and output, a
// Cast to float32 before and after the normalisation (the first one also
// read by the residual Add), Div(1, ·) for the Reciprocal. `one` other than
// 1: not an RMS norm.
ModelBuilder rms_norm_torchscript(float one) {
  ModelBuilder b;
  b.input("x", kFloat, {2, 5, 96}).output("y", kFloat, {2, 5, 96});
  b.initializer<float>("two", kFloat, {}, {2.f});
  b.initializer<int64_t>("axes", kInt64, {1}, {-1});
  b.initializer<float>("eps", kFloat, {}, {1e-6f});
  b.initializer<float>("one", kFloat, {}, {one});
  b.initializer<float>("w", kFloat, {96}, randoms(96, 9));
  ModelBuilder::attr_int(b.node("Cast", {"x"}, {"xc"}), "to", kFloat);
  b.node("Pow", {"xc", "two"}, {"sq"});
  ModelBuilder::attr_int(b.node("ReduceMean", {"sq", "axes"}, {"mean"}), "keepdims", 1);
  b.node("Add", {"mean", "eps"}, {"var"});
  b.node("Sqrt", {"var"}, {"std"});
  b.node("Div", {"one", "std"}, {"inv"});
  b.node("Mul", {"xc", "inv"}, {"xn"});
  ModelBuilder::attr_int(b.node("Cast", {"xn"}, {"xnc"}), "to", kFloat);
  b.node("Mul", {"w", "xnc"}, {"normed"});
  b.node("Add", {"xc", "normed"}, {"y"});
  return b;
}

TEST_CASE("rms norm fusion on the TorchScript exporter's form: identity Casts gone, Div(1, ·), bit-identical",
          "[fusion][rmsnorm]") {
  const Pair p = run_both(rms_norm_torchscript(1.f), "rms_ts", "infer-dtypes", "rms_norm_fused",
                          {{"x", tensor({2, 5, 96}, 1)}});
  CHECK(p.count == 1);
  CHECK(p.plain_nodes == 10);
  CHECK(p.fused_nodes == 2);  // RmsNorm and the residual Add, both reading x
  bit_identical(p.fused, p.plain);
}

TEST_CASE("rms norm fusion must not fire on Div(c, ·) for c other than 1", "[fusion][rmsnorm][must-not-fire]") {
  const Pair p = run_both(rms_norm_torchscript(2.f), "rms_ts_two", "infer-dtypes", "rms_norm_fused",
                          {{"x", tensor({2, 5, 96}, 1)}});
  CHECK(p.count == 0);
  CHECK(p.fused_nodes == 8);  // only the two identity Casts gone
  bit_identical(p.fused, p.plain);
}

// sdpa as torch.onnx's TorchScript exporter writes it: MatMul(Mul(q, sq),
// Mul(Transpose(k), sk)). k_vector: sk a [5] vector (one per key), not a
// scalar. dtype 10: the graph converted to float16 (transformers.js'
// model_fp16.onnx): inputs, scales and output float16.
ModelBuilder sdpa_scaled(float sq, float sk, bool k_vector, bool qs_output, int32_t dtype = kFloat) {
  ModelBuilder b;
  b.input("q", dtype, {1, 2, 3, 8}).input("k", dtype, {1, 2, 5, 8}).output("y", dtype, {1, 2, 3, 5});
  auto scale = [&](const char* name, std::vector<int64_t> dims, std::vector<float> v) {
    if (dtype == kFloat) return void(b.initializer<float>(name, kFloat, dims, v));
    std::vector<uint16_t> h;
    for (float x : v) h.push_back(float_to_half(x));
    b.initializer<uint16_t>(name, dtype, dims, h);
  };
  scale("sq", {}, {sq});
  if (k_vector) scale("sk", {5}, {sk, sk, 2 * sk, sk, sk});
  else scale("sk", {}, {sk});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("Mul", {"q", "sq"}, {"qs"});
  b.node("Mul", {"kt", "sk"}, {"ks"});
  b.node("MatMul", {"qs", "ks"}, {"y"});
  if (qs_output) b.output("qs", dtype, {1, 2, 3, 8});
  return b;
}

TEST_CASE("sdpa scales: the split scale becomes one scale on the scores", "[fusion][sdpa_scales]") {
  const std::vector<NamedTensor> in{{"q", tensor({1, 2, 3, 8}, 1)}, {"k", tensor({1, 2, 5, 8}, 2)}};
  SECTION("a power of two: bit-identical") {
    const Pair p = run_both(sdpa_scaled(0.5f, 0.5f, false, false), "sdpa_pow2", "sdpa-scales", "sdpa_scales_folded", in);
    CHECK(p.count == 1);
    CHECK(p.plain_nodes == 4);
    CHECK(p.fused_nodes == 3);  // Transpose, MatMul, Mul
    bit_identical(p.fused, p.plain);
  }
  SECTION("the fourth root of 1/64, as head size 64 gives: to rounding") {
    const float r = std::sqrt(0.125f);
    const Pair p = run_both(sdpa_scaled(r, r, false, false), "sdpa_root", "sdpa-scales", "sdpa_scales_folded", in);
    CHECK(p.count == 1);
    REQUIRE(p.fused.shape() == p.plain.shape());
    for (int64_t i = 0; i < p.fused.size(); ++i)
      CHECK(std::abs(p.fused.data<float>()[i] - p.plain.data<float>()[i]) <=
            1e-6f * (1.f + std::abs(p.plain.data<float>()[i])));
  }
}

TEST_CASE("sdpa scales on float16: one float16 scale on the scores, to float16 rounding", "[fusion][sdpa_scales]") {
  constexpr int32_t kHalf = 10;
  const std::vector<NamedTensor> in{{"q", half_tensor({1, 2, 3, 8}, 1)}, {"k", half_tensor({1, 2, 5, 8}, 2)}};
  auto widened = [](const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.size()));
    for (int64_t i = 0; i < t.size(); ++i) v[static_cast<size_t>(i)] = half_to_float(t.data<uint16_t>()[i]);
    return v;
  };
  for (const float r : {0.5f, std::sqrt(0.125f)}) {  // a power of two, and head size 64's fourth root of 1/64
    INFO("sqrt of the scale " << r);
    const Pair p = run_both(sdpa_scaled(r, r, false, false, kHalf), "sdpa_f16", "sdpa-scales", "sdpa_scales_folded", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 3);  // Transpose, MatMul, Mul
    REQUIRE(p.fused.dtype() == DType::F16);
    REQUIRE(p.fused.shape() == p.plain.shape());
    const std::vector<float> got = widened(p.fused), want = widened(p.plain);
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 4e-3f * (1.f + std::abs(want[i])));
    if (r == 0.5f) CHECK(got == want);  // each factor's scaling exact: the same products
  }
}

TEST_CASE("sdpa scales must not fire on a per-key scale or a scaled factor read elsewhere",
          "[fusion][sdpa_scales][must-not-fire]") {
  const std::vector<NamedTensor> in{{"q", tensor({1, 2, 3, 8}, 1)}, {"k", tensor({1, 2, 5, 8}, 2)}};
  const Pair vec = run_both(sdpa_scaled(0.5f, 0.5f, true, false), "sdpa_vec", "sdpa-scales", "sdpa_scales_folded", in);
  CHECK(vec.count == 0);
  bit_identical(vec.fused, vec.plain);
  const Pair out = run_both(sdpa_scaled(0.5f, 0.5f, false, true), "sdpa_out", "sdpa-scales",
                            "sdpa_scales_refused:scaled_factor_read_elsewhere", in);
  CHECK(out.count == 1);
  bit_identical(out.fused, out.plain);
}

// Gather(Shape(Reshape(x, r)), i) for r = [dim 0 of x (symbolic), -1, dim 1 of
// x (declared 8)]: only the last entry is a number for every size.
TEST_CASE("reshaped dims: a Reshape target's fixed entry read as a constant", "[fusion][reshaped_dims]") {
  ModelBuilder b;
  b.input("x", kFloat, {-1, 8}).output("z", kInt64, {3});
  b.initializer<int64_t>("i0", kInt64, {}, {0});
  b.initializer<int64_t>("i1", kInt64, {}, {1});
  b.initializer<int64_t>("last", kInt64, {}, {-1});
  b.initializer<int64_t>("minus1", kInt64, {1}, {-1});
  b.initializer<int64_t>("axis0", kInt64, {1}, {0});
  b.node("Shape", {"x"}, {"sx"});
  b.node("Gather", {"sx", "i0"}, {"d0"});
  b.node("Gather", {"sx", "i1"}, {"d1"});
  b.node("Unsqueeze", {"d0", "axis0"}, {"u0"});
  b.node("Unsqueeze", {"d1", "axis0"}, {"u1"});
  ModelBuilder::attr_int(b.node("Concat", {"u0", "minus1", "u1"}, {"r"}), "axis", 0);
  b.node("Reshape", {"x", "r"}, {"y"});
  b.node("Shape", {"y"}, {"sy"});
  b.node("Gather", {"sy", "i0"}, {"g0"});
  b.node("Gather", {"sy", "i1"}, {"g1"});
  b.node("Gather", {"sy", "last"}, {"g2"}, "fixed");
  b.node("Unsqueeze", {"g0", "axis0"}, {"v0"});
  b.node("Unsqueeze", {"g1", "axis0"}, {"v1"});
  b.node("Unsqueeze", {"g2", "axis0"}, {"v2"});
  ModelBuilder::attr_int(b.node("Concat", {"v0", "v1", "v2"}, {"z"}), "axis", 0);
  const std::string path = scratch_dir("reshaped_dims") + "/model.onnx";
  b.save(path);
  Session on(load_onnx(path), default_op_registry());
  SessionOptions o;
  o.stop_after_pass = test::pass_index("reshaped-dims");
  Session off(load_onnx(path), default_op_registry(), o);
  CHECK(on.pass_report().get("reshaped_dims_read") == 1);
  bool fixed_left = false;
  for (const Node& n : on.graph().nodes) fixed_left |= n.name == "fixed";
  CHECK_FALSE(fixed_left);
  for (int64_t rows : {1, 3}) {
    const std::vector<NamedTensor> in{{"x", tensor({rows, 8}, 4)}};
    const Tensor a = on.run(in)[0], c = off.run(in)[0];
    REQUIRE(a.size() == 3);
    REQUIRE(c.size() == 3);
    for (int64_t i = 0; i < 3; ++i) CHECK(a.data<int64_t>()[i] == c.data<int64_t>()[i]);
    CHECK(a.data<int64_t>()[0] == rows);
    CHECK(a.data<int64_t>()[2] == 8);
  }
}

// torch.onnx's TorchScript exporter writes rotate_half's bounds from the
// shape: x = Transpose(Reshape(p, [dim 0, dim 1, heads, d]), 0 2 1 3), half =
// Div(Gather(Shape(x), 3), 2). With d a constant the reshaped-dims pass
// reads dim 3 through the Transpose, folding makes the bounds constants and
// the rotary fusion takes the pattern. With d = -1 (heads fixed instead)
// the dim is not known and nothing fuses.
ModelBuilder rotary_from_shape(bool fixed_head_size) {
  const int64_t heads = 2, d = 16;
  ModelBuilder b;
  b.input("p", kFloat, {2, 3, heads * d}).input("cos", kFloat, {1, 1, 3, d}).input("sin", kFloat, {1, 1, 3, d});
  b.output("y", kFloat, {2, heads, 3, d});
  b.initializer<float>("unit", kFloat, {}, {1.f});
  b.initializer<int64_t>("i0", kInt64, {}, {0});
  b.initializer<int64_t>("i1", kInt64, {}, {1});
  b.initializer<int64_t>("i3", kInt64, {}, {3});
  b.initializer<int64_t>("two", kInt64, {}, {2});
  b.initializer<int64_t>("axis0", kInt64, {1}, {0});
  b.initializer<int64_t>("e2", kInt64, {1}, {fixed_head_size ? -1 : heads});
  b.initializer<int64_t>("e3", kInt64, {1}, {fixed_head_size ? d : -1});
  b.initializer<int64_t>("zero", kInt64, {1}, {0});
  b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
  b.initializer<int64_t>("axis3", kInt64, {1}, {3});
  b.initializer<int64_t>("one", kInt64, {1}, {1});
  b.node("Mul", {"p", "unit"}, {"q"});  // undeclared: its rank is not known
  b.node("Shape", {"q"}, {"sq"});
  b.node("Gather", {"sq", "i0"}, {"d0"});
  b.node("Gather", {"sq", "i1"}, {"d1"});
  b.node("Unsqueeze", {"d0", "axis0"}, {"u0"});
  b.node("Unsqueeze", {"d1", "axis0"}, {"u1"});
  ModelBuilder::attr_int(b.node("Concat", {"u0", "u1", "e2", "e3"}, {"r"}), "axis", 0);
  b.node("Reshape", {"q", "r"}, {"heads"});
  ModelBuilder::attr_ints(b.node("Transpose", {"heads"}, {"x"}), "perm", {0, 2, 1, 3});
  b.node("Shape", {"x"}, {"sx"});
  b.node("Gather", {"sx", "i3"}, {"dim"});
  b.node("Div", {"dim", "two"}, {"half"});
  b.node("Unsqueeze", {"half", "axis0"}, {"h"});
  b.node("Mul", {"x", "cos"}, {"a"});
  b.node("Slice", {"x", "zero", "h", "axis3", "one"}, {"lo"});
  b.node("Slice", {"x", "h", "big", "axis3", "one"}, {"hi"});
  b.node("Neg", {"hi"}, {"nhi"});
  ModelBuilder::attr_int(b.node("Concat", {"nhi", "lo"}, {"rot"}), "axis", -1);
  b.node("Mul", {"rot", "sin"}, {"bb"});
  b.node("Add", {"a", "bb"}, {"y"});
  return b;
}

// The same read through a Transpose without a perm (its reversal needs a
// rank the file may declare wrongly) or with a perm that is no permutation:
// nothing is read, nothing fuses.
TEST_CASE("reshaped dims must not read through a Transpose without a valid perm",
          "[fusion][reshaped_dims][must-not-fire]") {
  for (const std::vector<int64_t>& perm : {std::vector<int64_t>{}, std::vector<int64_t>{0, 2, 2, 3}}) {
    INFO("perm of " << perm.size());
    ModelBuilder b;
    b.input("x", kFloat, {2, 3, 4, 8}).output("z", kInt64, {});
    b.initializer<int64_t>("r", kInt64, {4}, {2, 3, 4, 8});
    b.initializer<int64_t>("i3", kInt64, {}, {3});
    b.node("Reshape", {"x", "r"}, {"y"});
    auto& t = b.node("Transpose", {"y"}, {"yt"});
    if (!perm.empty()) ModelBuilder::attr_ints(t, "perm", perm);
    b.node("Shape", {"yt"}, {"s"});
    ModelBuilder::attr_int(b.node("Gather", {"s", "i3"}, {"z"}), "axis", 0);
    Session on = test::session_until(b, "reshaped_dims_perm");
    CHECK(on.pass_report().get("reshaped_dims_read") == 0);
    if (perm.empty()) {  // the default perm reverses: dim 3 of yt is dim 0 of y
      const Tensor z = on.run({{"x", tensor({2, 3, 4, 8}, 1)}})[0];
      CHECK(*z.data<int64_t>() == 2);
    }
  }
}

TEST_CASE("rotary fusion: bounds read off the shape of a transposed Reshape (TorchScript export)",
          "[fusion][rotary][reshaped_dims]") {
  const std::vector<NamedTensor> in{
      {"p", tensor({2, 3, 32}, 1)}, {"cos", tensor({1, 1, 3, 16}, 2)}, {"sin", tensor({1, 1, 3, 16}, 3)}};
  const Pair p = run_both(rotary_from_shape(true), "rot_shape", "reshaped-dims", "rotary_fused", in);
  CHECK(p.count == 1);
  bit_identical(p.fused, p.plain);
  const Pair q = run_both(rotary_from_shape(false), "rot_shape_unknown", "reshaped-dims", "rotary_fused", in);
  CHECK(q.count == 0);
  bit_identical(q.fused, q.plain);
}

// transformers 4.x's sdpa with no scale given, as torch.onnx's TorchScript
// exporter writes it below opset 23: the scale is 1/√(q.size(-1)) read off
// the rotary output's shape, Slice(Shape(qr), [-1], [past the end]), then
// split as a square root on each factor. qr = x·cos + x·sin with x a
// transposed Reshape whose last target entry is d (or -1: not known).
ModelBuilder sdpa_scale_from_shape(bool fixed_head_size) {
  const int64_t heads = 2, d = 16;
  ModelBuilder b;
  b.input("p", kFloat, {2, 3, heads * d}).input("cos", kFloat, {1, 1, 3, d}).input("sin", kFloat, {1, 1, 3, d});
  b.input("k", kFloat, {2, heads, 5, d}).output("y", kFloat, {2, heads, 3, 5});
  b.initializer<float>("unit", kFloat, {}, {1.f});
  b.initializer<float>("one_f", kFloat, {1}, {1.f});
  b.initializer<int64_t>("r", kInt64, {4}, {2, 3, heads, fixed_head_size ? d : -1});
  b.initializer<int64_t>("minus1", kInt64, {1}, {-1});
  b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
  b.node("Mul", {"p", "unit"}, {"q"});  // undeclared: its rank is not known
  b.node("Reshape", {"q", "r"}, {"heads"});
  ModelBuilder::attr_ints(b.node("Transpose", {"heads"}, {"x"}), "perm", {0, 2, 1, 3});
  b.node("Mul", {"x", "cos"}, {"xc"});
  b.node("Mul", {"x", "sin"}, {"xs"});
  b.node("Add", {"xc", "xs"}, {"qr"});
  b.node("Shape", {"qr"}, {"sq"});
  b.node("Slice", {"sq", "minus1", "big"}, {"dim"}, "head_size");
  ModelBuilder::attr_int(b.node("Cast", {"dim"}, {"dimf"}), "to", kFloat);
  b.node("Sqrt", {"dimf"}, {"root"});
  b.node("Div", {"one_f", "root"}, {"scale"});
  b.node("Sqrt", {"scale"}, {"half_scale"});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("Mul", {"qr", "half_scale"}, {"qs"});
  b.node("Mul", {"kt", "half_scale"}, {"ks"});
  b.node("MatMul", {"qs", "ks"}, {"y"});
  return b;
}

TEST_CASE("sdpa scales: a scale read off the rotary output's last dim (transformers 4.x, opset 14)",
          "[fusion][sdpa_scales][reshaped_dims]") {
  const std::vector<NamedTensor> in{{"p", tensor({2, 3, 32}, 1)},
                                    {"cos", tensor({1, 1, 3, 16}, 2)},
                                    {"sin", tensor({1, 1, 3, 16}, 3)},
                                    {"k", tensor({2, 2, 5, 16}, 4)}};
  const Pair p = run_both(sdpa_scale_from_shape(true), "sdpa_shape", "reshaped-dims", "sdpa_scales_folded", in);
  CHECK(p.count == 1);
  // Head size 16: √s = 1/2, so one scale of 1/4 on the sums is exact.
  bit_identical(p.fused, p.plain);
  const Session on = test::session_until(sdpa_scale_from_shape(true), "sdpa_shape_nodes");
  CHECK(on.pass_report().get("reshaped_dims_read") == 1);
  for (const Node& n : on.graph().nodes) CHECK(n.name != "head_size");
  const Pair q = run_both(sdpa_scale_from_shape(false), "sdpa_shape_unknown", "reshaped-dims", "sdpa_scales_folded", in);
  CHECK(q.count == 0);
  bit_identical(q.fused, q.plain);
}

// Across a broadcast a dim of 1 says nothing (the other operand's dim is
// the output's), and a dim counted from the front is not the same dim when
// the operands' ranks differ: neither is read.
TEST_CASE("reshaped dims must not read a broadcast's dim of 1 or a front axis through a broadcast",
          "[fusion][reshaped_dims][must-not-fire]") {
  for (const bool front : {false, true}) {
    INFO((front ? "Gather index 2 of the rank-4 sum of a rank-3 Reshape" : "the last dim, 1 on the Reshape's side"));
    ModelBuilder b;
    b.input("x", kFloat, {front ? 30 : 6}).input("w", kFloat, {4, 2, 3, 5}).output("z", kInt64, {-1});
    b.initializer<int64_t>("r", kInt64, {3}, {2, 3, front ? 5 : 1});
    b.initializer<int64_t>("minus1", kInt64, {1}, {-1});
    b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
    b.initializer<int64_t>("i2", kInt64, {1}, {2});
    b.node("Reshape", {"x", "r"}, {"y"});
    b.node("Add", {"y", "w"}, {"sum"});  // [4, 2, 3, 5]
    b.node("Shape", {"sum"}, {"s"});
    b.initializer<int64_t>("zero", kInt64, {1}, {0});
    if (front) ModelBuilder::attr_int(b.node("Gather", {"s", "i2"}, {"dim"}), "axis", 0);
    else b.node("Slice", {"s", "minus1", "big"}, {"dim"});
    b.node("Add", {"dim", "zero"}, {"z"});  // the read is no graph output
    Session on = test::session_until(b, front ? "reshaped_front" : "reshaped_one");
    CHECK(on.pass_report().get("reshaped_dims_read") == 0);
    const Tensor z = on.run({{"x", tensor({front ? 30 : 6}, 1)}, {"w", tensor({4, 2, 3, 5}, 2)}})[0];
    CHECK(*z.data<int64_t>() == (front ? 3 : 5));
  }
}

// Partial rotary (Phi-2): the rotated and the passed halves of each head,
// Slice(x, [0], [6], axes [3]) and Slice(x, [-10], [end], axes [-1]), joined
// by a Concat along the last axis; q.size(-1) is the sum of the two, each
// clamped as Slice clamps. A step other than 1 is not read.
TEST_CASE("reshaped dims: a dim read through Slices and a Concat of the halves", "[fusion][reshaped_dims]") {
  for (const int64_t step : {1, 2}) {
    CAPTURE(step);
    ModelBuilder b;
    b.input("p", kFloat, {2, 3, 32}).input("c", kFloat, {1, 1, 3, 6}).output("z", kInt64, {1});
    b.initializer<int64_t>("r", kInt64, {4}, {2, 3, 2, 16});
    b.initializer<int64_t>("zero", kInt64, {1}, {0});
    b.initializer<int64_t>("six", kInt64, {1}, {6});
    b.initializer<int64_t>("minus10", kInt64, {1}, {-10});
    b.initializer<int64_t>("minus1", kInt64, {1}, {-1});
    b.initializer<int64_t>("axis3", kInt64, {1}, {3});
    b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
    b.initializer<int64_t>("step", kInt64, {1}, {step});
    b.initializer<int64_t>("i0", kInt64, {1}, {0});
    b.node("Reshape", {"p", "r"}, {"heads"});
    ModelBuilder::attr_ints(b.node("Transpose", {"heads"}, {"x"}), "perm", {0, 2, 1, 3});
    b.node("Slice", {"x", "zero", "six", "axis3"}, {"lo"});
    b.node("Slice", {"x", "minus10", "big", "minus1", "step"}, {"hi"});
    b.node("Mul", {"lo", "c"}, {"lc"});
    b.node("Add", {"lc", "lo"}, {"rot"});
    ModelBuilder::attr_int(b.node("Concat", {"rot", "hi"}, {"q"}), "axis", -1);
    b.node("Shape", {"q"}, {"sq"});
    b.node("Slice", {"sq", "minus1", "big"}, {"dim"});
    b.node("Add", {"dim", "i0"}, {"z"});
    Session on = test::session_until(b, "reshaped_halves");
    Session off = test::session_until(b, "reshaped_halves_plain", test::pass_index("reshaped-dims"));
    CHECK(on.pass_report().get("reshaped_dims_read") == (step == 1 ? 1 : 0));
    const std::vector<NamedTensor> in{{"p", tensor({2, 3, 32}, 1)}, {"c", tensor({1, 1, 3, 6}, 2)}};
    const Tensor a = on.run(in)[0], c = off.run(in)[0];
    CHECK(*a.data<int64_t>() == *c.data<int64_t>());
    CHECK(*a.data<int64_t>() == (step == 1 ? 16 : 11));
  }
}

// transformers 4.53's Phi-3 rotates q[..., :cos.size(-1)], cos computed as
// transformers computes it: Unsqueeze(Cos(Concat(f, f)) · scaling, [1])
// with f = Transpose(Expand(inv_freq, [b, 1, 1]) · positions): the width is
// inv_freq's length twice, read through the Unsqueeze, the scalar product,
// the Cos, the Concat, the Transpose, the MatMul's rows and the Expand. Its
// variants must not read what they do not fix: an Expand of a dim of 1
// (the shape's entry rules), and a MatMul by a rank-1 vector (the product's
// last dim is then A's rows, not B's length). Dim 1 of the Unsqueeze is the
// inserted 1.
TEST_CASE("reshaped dims: the rotary width read off cos through Expand, MatMul and Unsqueeze",
          "[fusion][reshaped_dims]") {
  struct Case {
    const char* name;
    int64_t half;      // inv_freq's length (1: the Expand case)
    int64_t index;     // the dim of Shape(cos) read
    bool vector_b;     // the MatMul by a rank-1 vector instead
    int64_t expected;  // what the read gives
    bool read;         // the pass proves it
  } cases[] = {{"width", 8, 3, false, 16, true},
               {"inserted", 8, 1, false, 1, true},
               {"expand_of_1", 1, 3, false, 2 * 5, false},
               {"vector_b", 8, -1, true, 8, false}};
  for (const Case& c : cases) {
    INFO(c.name);
    ModelBuilder b;
    b.input("pos", kInt64, {1, -1}).output("z", kInt64, {1});
    b.initializer<float>("inv_freq", kFloat, {1, c.half, 1}, std::vector<float>(static_cast<size_t>(c.half), 0.5f));
    b.initializer<float>("scaling", kFloat, {}, {1.0f});
    b.initializer<float>("vec", kFloat, {1}, {2.0f});
    b.initializer<int64_t>("i0", kInt64, {}, {0});
    b.initializer<int64_t>("at", kInt64, {1}, {c.index});
    b.initializer<int64_t>("ones", kInt64, {1}, {1});
    b.initializer<int64_t>("five_one", kInt64, {2}, {c.half == 1 ? 5 : 1, 1});
    b.initializer<int64_t>("axis0", kInt64, {1}, {0});
    b.initializer<int64_t>("axis1", kInt64, {1}, {1});
    b.initializer<int64_t>("zero", kInt64, {1}, {0});
    b.node("Shape", {"pos"}, {"sp"});
    b.node("Gather", {"sp", "i0"}, {"batch"});
    b.node("Unsqueeze", {"batch", "axis0"}, {"ub"});
    ModelBuilder::attr_int(b.node("Concat", {"ub", "five_one"}, {"eshape"}), "axis", 0);
    b.node("Expand", {"inv_freq", "eshape"}, {"a"});  // [b, half, 1] (or [b, 5, 1] of a 1)
    b.node("Unsqueeze", {"pos", "axis1"}, {"pos3"});
    ModelBuilder::attr_int(b.node("Cast", {"pos3"}, {"posf"}), "to", kFloat);  // [b, 1, s]
    // vector_b reads the product's last dim: [b, half, 1] · [1] -> [b, half]
    b.node("MatMul", {"a", c.vector_b ? "vec" : "posf"}, {"f0"});  // else [b, half, s]
    ModelBuilder::attr_ints(b.node("Transpose", {"f0"}, {"f"}), "perm", {0, 2, 1});
    ModelBuilder::attr_int(b.node("Concat", {"f", "f"}, {"emb"}), "axis", -1);
    b.node("Cos", {"emb"}, {"cos0"});
    b.node("Mul", {"cos0", "scaling"}, {"cos1"});
    b.node("Unsqueeze", {"cos1", "axis1"}, {"cos"});
    b.node("Shape", {c.vector_b ? "f0" : "cos"}, {"sc"});
    b.node("Gather", {"sc", "at"}, {"dim"});
    b.node("Add", {"dim", "zero"}, {"z"});
    const std::string name = std::string("reshaped_cos_") + c.name;
    Session on = test::session_until(b, name);
    Session off = test::session_until(b, name + "_plain", test::pass_index("reshaped-dims"));
    CHECK(on.pass_report().get("reshaped_dims_read") == (c.read ? 1 : 0));
    Tensor pos = Tensor::allocate(DType::I64, {1, 3});
    for (int64_t i = 0; i < 3; ++i) pos.data<int64_t>()[i] = i;
    const Tensor a = on.run({{"pos", pos}})[0], o = off.run({{"pos", pos}})[0];
    CHECK(*a.data<int64_t>() == *o.data<int64_t>());
    CHECK(*a.data<int64_t>() == c.expected);
  }
}

// A crafted chain of 24 Concats, each of three copies of the one below, asks
// a proof to visit 3^24 nodes: the proof stops at its step budget and reads
// nothing, so the session is made at once (before the budget this hung).
TEST_CASE("reshaped dims: a proof through a chain of Concats stops at its budget", "[fusion][reshaped_dims][hostile]") {
  ModelBuilder b;
  b.input("x", kFloat, {1, 1}).output("z", kInt64, {1});
  b.initializer<int64_t>("r", kInt64, {2}, {1, 1});
  b.initializer<int64_t>("minus1", kInt64, {1}, {-1});
  b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
  b.initializer<int64_t>("i0", kInt64, {1}, {0});
  b.node("Reshape", {"x", "r"}, {"c0"});
  for (int i = 0; i < 24; ++i) {
    const std::string in = "c" + std::to_string(i), out = "c" + std::to_string(i + 1);
    ModelBuilder::attr_int(b.node("Concat", {in, in, in}, {out}), "axis", -1);
  }
  b.node("Shape", {"c24"}, {"s"});
  b.node("Slice", {"s", "minus1", "big"}, {"dim"});
  b.node("Add", {"dim", "i0"}, {"z"});
  const Session on = test::session_until(b, "reshaped_concat_chain");
  CHECK(on.pass_report().get("reshaped_dims_read") == 0);
}

TEST_CASE("rotary fusion: rotate_half and the two products become one node, bit-identical", "[fusion][rotary]") {
  const Pair p = run_both(rotary(8, false), "rot_on", "fuse-rotary", "rotary_fused",
                          {{"x", tensor({1, 4, 3, 16}, 1)}, {"cos", tensor({1, 1, 3, 16}, 2)}, {"sin", tensor({1, 1, 3, 16}, 3)}});
  CHECK(p.count == 1);
  CHECK(p.fused_nodes == 1);
  bit_identical(p.fused, p.plain);
}

TEST_CASE("rotary fusion on float16: each operation rounded as the nodes round it, bit-identical", "[fusion][rotary]") {
  const Pair p = run_both(rotary(8, false, 10), "rot_f16", "fuse-rotary", "rotary_fused",
                          {{"x", half_tensor({1, 4, 3, 16}, 1)}, {"cos", half_tensor({1, 1, 3, 16}, 2)},
                           {"sin", half_tensor({1, 1, 3, 16}, 3)}});
  CHECK(p.count == 1);
  REQUIRE(p.fused.dtype() == DType::F16);
  REQUIRE(p.fused.shape() == p.plain.shape());
  CHECK(std::memcmp(p.fused.raw(), p.plain.raw(), p.fused.bytes()) == 0);
}

// A decoder's rotary chain and a projection after it, in bfloat16 (dtype
// 16) as a transformers export of a bfloat16 checkpoint writes them; or in
// float32 with the projection's weight stored as bfloat16 and widened by a
// Cast (widened_weight), which computes in float32.
ModelBuilder bf16_layer(bool widened_weight) {
  constexpr int32_t kBf16 = 16;
  const int32_t act = widened_weight ? kFloat : kBf16;
  ModelBuilder b = rotary(8, false, act);
  b.graph().mutable_output()->Clear();
  b.output("out", act, {1, 4, 3, 24});
  std::vector<uint16_t> w(16 * 24);
  const auto v = randoms(w.size(), 11);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float_to_bfloat16(v[i]);
  b.initializer<uint16_t>("w", kBf16, {16, 24}, w);
  if (widened_weight) {
    ModelBuilder::attr_int(b.node("Cast", {"w"}, {"wf"}), "to", kFloat);
    b.node("MatMul", {"y", "wf"}, {"out"});
  } else {
    b.node("MatMul", {"y", "w"}, {"out"});
  }
  return b;
}

Tensor bf16_tensor(Shape shape, unsigned seed) {
  Tensor t = Tensor::allocate(DType::BF16, shape);
  const auto v = randoms(static_cast<size_t>(t.size()), seed);
  for (size_t i = 0; i < v.size(); ++i) t.data<uint16_t>()[i] = float_to_bfloat16(v[i]);
  return t;
}

TEST_CASE("a graph computing in bfloat16 runs its own ops: no fusion, the same bits as --basic, one note",
          "[fusion][bf16]") {
  const std::string path = scratch_dir("bf16_layer") + "/model.onnx";
  bf16_layer(false).save(path);
  const std::vector<NamedTensor> in = {{"x", bf16_tensor({1, 4, 3, 16}, 1)},
                                       {"cos", bf16_tensor({1, 1, 3, 16}, 2)},
                                       {"sin", bf16_tensor({1, 1, 3, 16}, 3)}};
  Session full(load_onnx(path), default_op_registry());
  SessionOptions o;
  o.basic = true;
  Session basic(load_onnx(path), default_op_registry(), o);
  CHECK(full.pass_report().get("bf16_unfused") == 1);
  CHECK(full.pass_report().get("rotary_fused") == 0);
  REQUIRE(full.pass_report().notes.size() == 1);
  CHECK_THAT(full.pass_report().notes[0], Catch::Contains("computes in bfloat16") &&
                                              Catch::Contains("node 'MatMul_8' (MatMul) multiplies bfloat16"));
  CHECK(basic.pass_report().get("bf16_unfused") == 0);  // --basic never fuses, so it has nothing to say
  const Tensor a = full.run(in)[0], b = basic.run(in)[0];
  REQUIRE(a.dtype() == DType::BF16);
  REQUIRE(a.shape() == b.shape());
  CHECK(std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

TEST_CASE("a bfloat16 weight widened before its MatMul computes in float32: the fusions run",
          "[fusion][bf16][must-not-fire]") {
  const std::string path = scratch_dir("bf16_weight") + "/model.onnx";
  bf16_layer(true).save(path);
  Session s(load_onnx(path), default_op_registry());
  CHECK(s.pass_report().get("bf16_unfused") == 0);
  CHECK(s.pass_report().get("rotary_fused") == 1);
  CHECK(s.pass_report().notes.empty());
  SessionOptions o;
  o.basic = true;
  Session basic(load_onnx(path), default_op_registry(), o);
  const std::vector<NamedTensor> in = {{"x", tensor({1, 4, 3, 16}, 1)}, {"cos", tensor({1, 1, 3, 16}, 2)},
                                       {"sin", tensor({1, 1, 3, 16}, 3)}};
  const Tensor y = s.run(in)[0];
  CHECK(y.dtype() == DType::F32);
  bit_identical(y, basic.run(in)[0]);  // the fused rotary replays the nodes' operations
}

TEST_CASE("rotary fusion must not fire when the halves are swapped", "[fusion][rotary][must-not-fire]") {
  const Pair p = run_both(rotary(8, true), "rot_swapped", "fuse-rotary", "rotary_fused",
                          {{"x", tensor({1, 4, 3, 16}, 1)}, {"cos", tensor({1, 1, 3, 16}, 2)}, {"sin", tensor({1, 1, 3, 16}, 3)}});
  CHECK(p.count == 0);
}

TEST_CASE("gqa fusion: Q.K^T and P.V read the KV heads without repeating them", "[fusion][gqa]") {
  for (bool qk : {true, false})
    for (int64_t s : {1, 5}) {
      const int64_t kvh = 2, rep = 3, t = 37, d = 16;
      const Pair p = run_both(gqa(qk, kvh, rep, s, t, d), qk ? "gqa_qk" : "gqa_pv", "fuse-gqa-matmul", "gqa_fused",
                              {{"a", tensor({1, kvh * rep, s, qk ? d : t}, 4)}, {"kv", tensor({1, kvh, t, d}, 5)}});
      CHECK(p.count == 1);
      CHECK(p.fused_nodes == 1);
      REQUIRE(p.fused.shape() == p.plain.shape());
      double worst = 0;
      for (int64_t i = 0; i < p.fused.size(); ++i)
        worst = std::max(worst, double(std::fabs(p.fused.data<float>()[i] - p.plain.data<float>()[i])));
      CHECK(worst < 1e-5);
    }
}

namespace {

// Q·Kᵀ -> Softmax -> P·V over caches Concat(past, new), their repeat_kv
// targets computed from the cache's Shape (tests/repeat_kv_util.h) as
// transformers exports them; symbolic lengths, so one session runs a
// prompt and decode steps.
ModelBuilder gqa_shapes(int64_t kvh, int64_t rep, int64_t d, const test::RepeatTargets& k) {
  const int64_t h = kvh * rep;
  ModelBuilder b;
  b.input("q", kFloat, {1, h, -1, d}).output("y", kFloat, {1, h, -1, d});
  b.dim_param("q", 2, "s").dim_param("y", 2, "s");
  b.initializer<int64_t>("ax", kInt64, {1}, {2});
  for (const char* kv : {"k", "v"}) {
    const std::string x = kv;
    b.input("past_" + x, kFloat, {1, kvh, -1, d}).input("new_" + x, kFloat, {1, kvh, -1, d});
    b.dim_param("past_" + x, 2, "past").dim_param("new_" + x, 2, "s");
    ModelBuilder::attr_int(b.node("Concat", {"past_" + x, "new_" + x}, {"cache_" + x}), "axis", 2);
    test::add_repeat_kv_targets(b, "cache_" + x, x + "_", "e_" + x, "r_" + x, x == "k" ? k : test::RepeatTargets{});
    b.node("Unsqueeze", {"cache_" + x, "ax"}, {"u_" + x});
    b.node("Expand", {"u_" + x, "e_" + x}, {"ex_" + x});
    b.node("Reshape", {"ex_" + x, "r_" + x}, {"rep_" + x});
  }
  ModelBuilder::attr_ints(b.node("Transpose", {"rep_k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"});
  ModelBuilder::attr_int(b.node("Softmax", {"scores"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "rep_v"}, {"y"});
  return b;
}

std::vector<NamedTensor> gqa_inputs(int64_t kvh, int64_t rep, int64_t s, int64_t past, int64_t d) {
  return {{"q", tensor({1, kvh * rep, s, d}, 1)},     {"past_k", tensor({1, kvh, past, d}, 2)},
          {"new_k", tensor({1, kvh, s, d}, 3)},       {"past_v", tensor({1, kvh, past, d}, 4)},
          {"new_v", tensor({1, kvh, s, d}, 5)}};
}

}  // namespace

// The targets proven [b, kvh, rep, T, d] and [b, kvh·rep, T, d] for every
// size: the GqaMatMuls take the repeat as kv_repeat and the Shape chains
// are dead, so no decode step evaluates them again.
TEST_CASE("gqa fusion: repeat_kv targets computed from the cache's shape proven the repeat", "[fusion][gqa]") {
  const int64_t kvh = 2, rep = 3, d = 8;
  const std::string path = scratch_dir("gqa_shapes") + "/model.onnx";
  gqa_shapes(kvh, rep, d, {}).save(path);
  Session fused(load_onnx(path), default_op_registry());
  SessionOptions o;
  o.stop_after_pass = test::pass_index("fuse-gqa-matmul");
  Session plain(load_onnx(path), default_op_registry(), o);
  CHECK(fused.pass_report().get("gqa_fused") == 2);
  CHECK(fused.pass_report().get("gqa_fused_repeat_proven") == 2);
  int gqa = 0;
  for (const Node& n : fused.graph().nodes) {
    CHECK(n.op_type != "Shape");  // the chains are gone
    if (n.op_type != "GqaMatMul") continue;
    ++gqa;
    CHECK(n.inputs.size() == 2);
    CHECK(n.attrs.get_int("kv_repeat", 0) == rep);
  }
  CHECK(gqa == 2);
  agree_at_lengths(fused, plain, {{4, 0}, {1, 4}, {1, 5}, {3, 6}},
                   [&](int64_t s, int64_t past) { return gqa_inputs(kvh, rep, s, past, d); });
}

TEST_CASE("gqa fusion: targets not proven stay inputs, checked when planned", "[fusion][gqa]") {
  const int64_t kvh = 2, rep = 3, d = 8;
  test::RepeatTargets wrong;
  wrong.r_mul = 2;  // r repeats the heads twice where e repeats them three times
  const std::string path = scratch_dir("gqa_shapes_wrong") + "/model.onnx";
  gqa_shapes(kvh, rep, d, wrong).save(path);
  Session fused(load_onnx(path), default_op_registry());
  CHECK(fused.pass_report().get("gqa_fused") == 2);
  CHECK(fused.pass_report().get("gqa_fused_repeat_proven") == 1);  // V's
  CHECK_THROWS_WITH(fused.run(gqa_inputs(kvh, rep, 1, 3, d)), Catch::Contains("is not [b, kvh*rep, T, d]"));
}

// transformers 4.x slices the mask to the keys' length read off the repeated
// keys, Gather(Shape(repeat_kv(K)), 2): once the product is fused on a
// proven repeat, that Shape reads the cache (the same dim) and the repeat
// chain is dead. A read of dim 1 (the repeated heads) is not the cache's and
// keeps its chain.
TEST_CASE("gqa fusion: the keys' length read off the repeated keys reads the cache", "[fusion][gqa]") {
  const int64_t kvh = 2, rep = 3, d = 8;
  for (const int64_t axis : {2, 1}) {
    CAPTURE(axis);
    ModelBuilder b = gqa_shapes(kvh, rep, d, {});
    b.initializer<int64_t>("dim_index", kInt64, {1}, {axis});
    b.output("t", kInt64, {1});
    b.node("Shape", {"rep_k"}, {"s_rep"});
    ModelBuilder::attr_int(b.node("Gather", {"s_rep", "dim_index"}, {"t"}), "axis", 0);
    Session fused = test::session_until(b, "gqa_shape_reads");
    Session plain = test::session_until(b, "gqa_shape_reads_plain", test::pass_index("fuse-gqa-matmul"));
    CHECK(fused.pass_report().get("gqa_fused_repeat_proven") == 2);
    CHECK(fused.pass_report().get("gqa_fused_shape_reads_moved") == (axis == 2 ? 1 : 0));
    int expands = 0;
    for (const Node& n : fused.graph().nodes) expands += n.op_type == "Expand";
    CHECK(expands == (axis == 2 ? 0 : 1));  // K's chain dead, or kept for its dim 1
    for (const auto& [s, past] : std::vector<std::pair<int64_t, int64_t>>{{4, 0}, {1, 4}, {2, 5}}) {
      CAPTURE(s, past);
      const std::vector<NamedTensor> in = gqa_inputs(kvh, rep, s, past, d);
      const std::vector<Tensor> a = fused.run(in), c = plain.run(in);
      CHECK(max_abs_diff(a[0], c[0]) < 1e-5);
      CHECK(*a[1].data<int64_t>() == *c[1].data<int64_t>());
      CHECK(*a[1].data<int64_t>() == (axis == 2 ? s + past : kvh * rep));
    }
  }
}

TEST_CASE("GqaMatMul: kv_repeat is checked as the repeat's shapes are", "[gqa]") {
  using test::OpTest;
  const int64_t kvh = 2, rep = 2, s = 3, t = 5, d = 8;
  const Tensor q = tensor({1, kvh * rep, s, d}, 1), k = tensor({1, kvh, t, d}, 2);
  auto run = [&](int64_t kv_repeat, bool shapes, const Tensor& cache) {
    OpTest op("GqaMatMul", 1, "com.onebit");
    op.attr("transB", 1);
    if (kv_repeat != 0) op.attr("kv_repeat", kv_repeat);
    op.input(q).input(cache);
    if (shapes) {
      op.constant(test::make_tensor<int64_t>({5}, {1, kvh, rep, cache.dim(2), d}));
      op.constant(test::make_tensor<int64_t>({4}, {1, kvh * rep, cache.dim(2), d}));
    }
    return op.run1();
  };
  const Tensor with_shapes = run(0, true, k), with_attr = run(rep, false, k);
  REQUIRE(with_attr.shape() == with_shapes.shape());
  bit_identical(with_attr, with_shapes);
  CHECK_THROWS_WITH(run(3, false, k), Catch::Contains("does not match the repeated KV"));
  CHECK_THROWS_WITH(run(-1, false, k), Catch::Contains("attribute kv_repeat is -1"));
  CHECK_THROWS_WITH(run(rep, true, k), Catch::Contains("expected one or the other"));
  // An empty cache: the graph's Reshape to [b, kvh·rep, 0, d] copies dim 2
  // of the Expand's output for that 0 (allowzero 0) and fails; so does this.
  CHECK_THROWS_WITH(run(rep, false, Tensor::allocate(DType::F32, {1, kvh, 0, d})),
                    Catch::Contains("Reshape of [1,2,2,0,8] to [1,4,0,8] is not [b, kvh*rep, T, d]"));
}

TEST_CASE("gqa fusion must not fire when the repeat axis is not 2", "[fusion][gqa][must-not-fire]") {
  ModelBuilder b;  // Unsqueeze on axis 1 repeats whole blocks: not repeat_kv
  b.input("a", kFloat, {1, 4, 1, 8}).input("kv", kFloat, {1, 2, 6, 8}).output("y", kFloat, {1, 4, 1, 6});
  b.initializer<int64_t>("ax", kInt64, {1}, {1});
  b.initializer<int64_t>("e", kInt64, {5}, {1, 2, 2, 6, 8});
  b.initializer<int64_t>("r", kInt64, {4}, {1, 4, 6, 8});
  b.node("Unsqueeze", {"kv", "ax"}, {"u"});
  b.node("Expand", {"u", "e"}, {"ex"});
  b.node("Reshape", {"ex", "r"}, {"rep"});
  ModelBuilder::attr_ints(b.node("Transpose", {"rep"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"a", "kt"}, {"y"});
  const Pair p = run_both(b, "gqa_axis1", "fuse-gqa-matmul", "gqa_fused",
                          {{"a", tensor({1, 4, 1, 8}, 4)}, {"kv", tensor({1, 2, 6, 8}, 5)}});
  CHECK(p.count == 0);
  bit_identical(p.fused, p.plain);
}

namespace {

// Cache x ("k" or "v") repeated by Expand to target e and Reshape to r,
// then transposed and flattened by Reshape to f: MultiHeadAttention's input.
void repeat_and_flatten(ModelBuilder& b, const std::string& x, const std::string& e, const std::string& r) {
  b.node("Unsqueeze", {"cache_" + x, "ax"}, {"u_" + x});
  b.node("Expand", {"u_" + x, e}, {"ex_" + x});
  b.node("Reshape", {"ex_" + x, r}, {"rep_" + x});
  ModelBuilder::attr_ints(b.node("Transpose", {"rep_" + x}, {"tr_" + x}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"tr_" + x, "f"}, {"flat_" + x});
}

void add_mha(ModelBuilder& b, int64_t heads) {
  auto& mha = b.node("MultiHeadAttention", {"q", "flat_k", "flat_v", "", "", "ab"}, {"y"});
  mha.set_domain("com.microsoft");
  ModelBuilder::attr_int(mha, "num_heads", heads);
}

// onnxruntime-genai's float16 attention (float32 here): each cache a Concat
// of past and new keys, repeated to the query heads and flattened, read by
// com.microsoft MultiHeadAttention with an attention_bias. unsqueeze_axis 1
// repeats whole blocks (not repeat_kv); expand_e overrides the Expand
// target [b, kvh, rep, T, d].
ModelBuilder mha_repeat(int64_t kvh, int64_t rep, int64_t s, int64_t past, int64_t d, int64_t unsqueeze_axis = 2,
                        std::vector<int64_t> expand_e = {}) {
  const int64_t n = kvh * rep, t = past + s;
  ModelBuilder b;
  auto* ms = b.proto().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  b.input("q", kFloat, {1, s, n * d}).input("ab", kFloat, {1, 1, s, t}).output("y", kFloat, {1, s, n * d});
  b.initializer<int64_t>("ax", kInt64, {1}, {unsqueeze_axis});
  if (expand_e.empty())
    expand_e = unsqueeze_axis == 2 ? std::vector<int64_t>{1, kvh, rep, t, d} : std::vector<int64_t>{1, rep, kvh, t, d};
  b.initializer<int64_t>("e", kInt64, {5}, expand_e);
  b.initializer<int64_t>("r", kInt64, {4}, {1, n, t, d});
  b.initializer<int64_t>("f", kInt64, {3}, {0, 0, n * d});
  for (const char* kv : {"k", "v"}) {
    const std::string x = kv;
    b.input("past_" + x, kFloat, {1, kvh, past, d}).input("new_" + x, kFloat, {1, kvh, s, d});
    ModelBuilder::attr_int(b.node("Concat", {"past_" + x, "new_" + x}, {"cache_" + x}), "axis", 2);
    repeat_and_flatten(b, x, "e", "r");
  }
  add_mha(b, n);
  return b;
}

std::vector<NamedTensor> mha_inputs(int64_t kvh, int64_t rep, int64_t s, int64_t past, int64_t d) {
  const int64_t n = kvh * rep, t = past + s;
  Tensor ab = Tensor::allocate(DType::F32, {1, 1, s, t});
  for (int64_t i = 0; i < s; ++i)  // causal over the last s positions, as genai's mask
    for (int64_t j = 0; j < t; ++j) ab.data<float>()[i * t + j] = j > past + i ? -65504.0f : 0.0f;
  return {{"q", tensor({1, s, n * d}, 11)},        {"ab", ab},
          {"past_k", tensor({1, kvh, past, d}, 12)}, {"new_k", tensor({1, kvh, s, d}, 13)},
          {"past_v", tensor({1, kvh, past, d}, 14)}, {"new_v", tensor({1, kvh, s, d}, 15)}};
}

}  // namespace

TEST_CASE("mha repeat_kv fusion: genai's float16 attention reads the unrepeated caches", "[fusion][mha]") {
  for (int64_t s : {1, 4}) {
    const int64_t kvh = 2, rep = 3, past = 7, d = 16;
    CAPTURE(s);
    const Pair p = run_both(mha_repeat(kvh, rep, s, past, d), "mha_rep", "fuse-mha-repeat-kv", "mha_repeat_kv_fused",
                            mha_inputs(kvh, rep, s, past, d));
    CHECK(p.count == 1);
    // The MultiHeadAttention and both chains' Unsqueeze, Expand, Reshape, Transpose, Reshape: 11 nodes become 1.
    CHECK(p.plain_nodes - p.fused_nodes == 10);
    REQUIRE(p.fused.shape() == p.plain.shape());
    double worst = 0;
    for (int64_t i = 0; i < p.fused.size(); ++i)
      worst = std::max(worst, double(std::fabs(p.fused.data<float>()[i] - p.plain.data<float>()[i])));
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("mha repeat_kv fusion must not fire when the repeat axis is not 2", "[fusion][mha][must-not-fire]") {
  const int64_t kvh = 2, rep = 3, s = 2, past = 5, d = 8;
  const Pair p = run_both(mha_repeat(kvh, rep, s, past, d, 1), "mha_axis1", "fuse-mha-repeat-kv", "mha_repeat_kv_fused",
                          mha_inputs(kvh, rep, s, past, d));
  CHECK(p.count == 0);
  bit_identical(p.fused, p.plain);
}

TEST_CASE("mha repeat_kv fusion: an Expand that is no repeat is refused at plan time, naming the shapes", "[fusion][mha]") {
  // Expand to one copy per KV head where the query has rep = 2 heads per KV head.
  const int64_t kvh = 2, rep = 2, s = 3, past = 5, d = 8;
  const ModelBuilder b = mha_repeat(kvh, rep, s, past, d, 2, {1, kvh, 1, past + s, d});
  const std::string path = scratch_dir("mha_not_repeat") + "/model.onnx";
  b.save(path);
  Session fused(load_onnx(path), default_op_registry());
  CHECK(fused.pass_report().get("mha_repeat_kv_fused") == 1);
  CHECK_THROWS_WITH(fused.run(mha_inputs(kvh, rep, s, past, d)), Catch::Contains("is not a repeat of each KV head 2 times"));
}

namespace {

// The same attention with each chain's Expand and Reshape targets computed
// from its cache's Shape, as onnxruntime-genai's builder writes them
// (tests/repeat_kv_util.h), and symbolic lengths: one session runs a
// prompt and decode steps.
ModelBuilder mha_repeat_shapes(int64_t kvh, int64_t rep, int64_t d, const test::RepeatTargets& k,
                               const test::RepeatTargets& v) {
  const int64_t n = kvh * rep;
  ModelBuilder b;
  auto* ms = b.proto().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  b.input("q", kFloat, {1, -1, n * d}).input("ab", kFloat, {1, 1, -1, -1}).output("y", kFloat, {1, -1, n * d});
  b.dim_param("q", 1, "s").dim_param("ab", 2, "s").dim_param("ab", 3, "t").dim_param("y", 1, "s");
  b.initializer<int64_t>("ax", kInt64, {1}, {2});
  b.initializer<int64_t>("f", kInt64, {3}, {0, 0, n * d});
  for (const char* kv : {"k", "v"}) {
    const std::string x = kv;
    b.input("past_" + x, kFloat, {1, kvh, -1, d}).input("new_" + x, kFloat, {1, kvh, -1, d});
    b.dim_param("past_" + x, 2, "past").dim_param("new_" + x, 2, "s");
    ModelBuilder::attr_int(b.node("Concat", {"past_" + x, "new_" + x}, {"cache_" + x}), "axis", 2);
    test::add_repeat_kv_targets(b, "cache_" + x, x + "_", "e_" + x, "r_" + x, x == "k" ? k : v);
    repeat_and_flatten(b, x, "e_" + x, "r_" + x);
  }
  add_mha(b, n);
  return b;
}

}  // namespace

TEST_CASE("mha repeat_kv fusion: the builder's Shape chains proven the repeat, read by no step", "[fusion][mha]") {
  const int64_t kvh = 2, rep = 3, d = 8;
  const std::string path = scratch_dir("mha_shapes") + "/model.onnx";
  mha_repeat_shapes(kvh, rep, d, {}, {}).save(path);
  Session fused(load_onnx(path), default_op_registry());
  SessionOptions o;
  o.stop_after_pass = test::pass_index("fuse-mha-repeat-kv");
  Session plain(load_onnx(path), default_op_registry(), o);
  CHECK(fused.pass_report().get("mha_repeat_kv_fused") == 1);
  CHECK(fused.pass_report().get("mha_repeat_kv_fused_repeat_proven") == 1);
  // What is left: the caches' Concats and the attention; no Shape chain.
  REQUIRE(fused.graph().nodes.size() == 3);
  const Node& ga = fused.graph().nodes.back();
  CHECK(ga.op_type == "GroupedAttention");
  CHECK(ga.attrs.get_int("kv_repeat", 0) == rep);
  for (int i : {4, 5, 7, 8}) CHECK(ga.inputs[static_cast<size_t>(i)] == -1);
  // A prompt, then steps: the same session at each length.
  agree_at_lengths(fused, plain, {{4, 0}, {1, 4}, {1, 5}, {2, 6}},
                   [&](int64_t s, int64_t past) { return mha_inputs(kvh, rep, s, past, d); });
}

TEST_CASE("mha repeat_kv fusion: a chain not proven keeps its targets, checked at plan time", "[fusion][mha]") {
  const int64_t kvh = 2, rep = 3, d = 8;
  test::RepeatTargets wrong;
  wrong.r_mul = 2;  // r repeats the heads twice where e repeats them three times
  for (bool key : {true, false}) {
    CAPTURE(key);
    const std::string path = scratch_dir("mha_shapes_wrong") + "/model.onnx";
    mha_repeat_shapes(kvh, rep, d, key ? wrong : test::RepeatTargets{}, key ? test::RepeatTargets{} : wrong).save(path);
    Session fused(load_onnx(path), default_op_registry());
    CHECK(fused.pass_report().get("mha_repeat_kv_fused") == 1);
    CHECK(fused.pass_report().get("mha_repeat_kv_fused_repeat_proven") == 0);
    CHECK_THROWS_WITH(fused.run(mha_inputs(kvh, rep, 1, 3, d)), Catch::Contains("is not [b, num_heads, T, d]"));
  }
}

TEST_CASE("GroupedAttention: without the repeat's targets, kv_repeat must repeat the caches to num_heads",
          "[fusion][mha]") {
  using test::make_tensor;
  const Tensor q = make_tensor<float>({1, 1, 4}, {1, 0, 0, 1});
  const Tensor kv = make_tensor<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor f = make_tensor<int64_t>({3}, {0, 0, 4});
  auto grouped = [&](int64_t kv_repeat, bool e_only, const Tensor& cache) {
    test::OpTest t("GroupedAttention", 1, "com.onebit");
    t.attr("num_heads", int64_t{2}).attr("kv_repeat", kv_repeat).input(q).input(cache).input(cache).omit();
    for (int i = 0; i < 2; ++i) {
      if (e_only) t.constant(make_tensor<int64_t>({5}, {1, 1, 2, 2, 2})).omit();
      else t.omit().omit();
      t.constant(f);
    }
    return t.run1();
  };
  CHECK(grouped(2, false, kv).shape() == Shape{1, 1, 4});
  CHECK_THROWS_WITH(grouped(1, false, kv), Catch::Contains("Expand to [1,1,1,2,2] of the cache [1,1,2,2] is not a repeat of each KV head 2 times"));
  CHECK_THROWS_WITH(grouped(0, false, kv), Catch::Contains("inputs 4 and 5 omitted, with kv_repeat = 0: expected 1 to num_heads = 2"));
  CHECK_THROWS_WITH(grouped(int64_t{1} << 62, false, kv), Catch::Contains("expected 1 to num_heads = 2"));
  CHECK_THROWS_WITH(grouped(2, true, kv), Catch::Contains("inputs 4 and 5 (the repeat's Expand and Reshape targets): one is omitted"));
  // An empty cache: the graph's Reshape to [b, kvh·rep, 0, d] copies dim 2
  // of the Expand's output for that 0 (allowzero 0) and fails; so does this.
  CHECK_THROWS_WITH(grouped(2, false, Tensor::allocate(DType::F32, {1, 1, 0, 2})),
                    Catch::Contains("Reshape of [1,1,2,0,2] to [1,2,2,2] is not [b, num_heads, T, d]"));
}

namespace {

// act_fn(gate) * up as torch writes SiLU: Sigmoid(g), Mul(g, s), Mul(silu, u).
// swapped: the other operand order at both Muls. u_dims: u's declared dims.
ModelBuilder swiglu(int32_t dtype, const std::vector<int64_t>& dims, const std::vector<int64_t>& u_dims, bool swapped,
                    bool silu_is_output = false) {
  ModelBuilder b;
  b.input("g", dtype, dims).input("u", dtype, u_dims).output("y", dtype, dims);
  if (silu_is_output) b.output("silu", dtype, dims);
  b.node("Sigmoid", {"g"}, {"s"});
  b.node("Mul", swapped ? std::vector<std::string>{"s", "g"} : std::vector<std::string>{"g", "s"}, {"silu"});
  b.node("Mul", swapped ? std::vector<std::string>{"u", "silu"} : std::vector<std::string>{"silu", "u"}, {"y"});
  return b;
}

// Values across the sigmoid's range: ordinary, saturating (|g| > 88, where
// e^-g over- or underflows), infinities, NaN, signed zeros, subnormals.
template <class Put>
void fill_extremes(int64_t n, unsigned seed, float scale, Put put) {
  const auto v = randoms(static_cast<size_t>(n), seed);
  const float special[] = {0.f, -0.f, 1e-40f, -1e-40f, 89.f, -89.f, 100.f, -100.f, INFINITY, -INFINITY, NAN, 17.5f};
  for (int64_t i = 0; i < n; ++i) put(i, i % 7 == 3 ? special[(i / 7) % 12] : scale * v[static_cast<size_t>(i)]);
}

Tensor swiglu_tensor(DType t, Shape shape, unsigned seed, float scale) {
  Tensor x = Tensor::allocate(t, shape);
  fill_extremes(x.size(), seed, scale, [&](int64_t i, float v) {
    if (t == DType::F16) x.data<uint16_t>()[i] = float_to_half(v);
    else x.data<float>()[i] = v;
  });
  return x;
}

}  // namespace

TEST_CASE("swiglu fusion: Sigmoid and two Muls become one node, bit-identical", "[fusion][swiglu]") {
  for (bool swapped : {false, true})
    for (DType t : {DType::F32, DType::F16})
      for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 5, 96}, std::vector<int64_t>{-1, 3, 700}}) {
        INFO("swapped " << swapped << " float16 " << (t == DType::F16) << " dims[1] " << dims[1]);
        const int32_t onnx_t = t == DType::F16 ? 10 : kFloat;
        const Shape shape{2, dims[1], dims[2]};
        const float scale = t == DType::F16 ? 6.f : 3.f;  // float16: products past 65504 round to infinity
        const Pair p = run_both(swiglu(onnx_t, dims, dims, swapped), "swiglu_on", "fuse-swiglu", "swiglu_fused",
                                {{"g", swiglu_tensor(t, shape, 1, scale)}, {"u", swiglu_tensor(t, shape, 2, 40.f)}});
        CHECK(p.count == 1);
        CHECK(p.fused_nodes == 1);
        CHECK(p.plain_nodes == 3);
        REQUIRE(p.fused.dtype() == t);
        REQUIRE(p.fused.shape() == p.plain.shape());
        CHECK(std::memcmp(p.fused.raw(), p.plain.raw(), p.fused.bytes()) == 0);
      }
}

TEST_CASE("swiglu fusion on gate and up projections of one input, shapes undeclared", "[fusion][swiglu]") {
  for (int64_t up_n : {int64_t{96}, int64_t{1}}) {  // 1: u broadcasts, so the shapes are not proven equal
    INFO("up columns " << up_n);
    ModelBuilder b;
    b.input("x", kFloat, {3, 64}).output("y", kFloat, {3, 96});
    b.initializer<float>("wg", kFloat, {64, 96}, randoms(64 * 96, 5));
    b.initializer<float>("wu", kFloat, {64, up_n}, randoms(static_cast<size_t>(64 * up_n), 6));
    b.node("MatMul", {"x", "wg"}, {"g"});
    b.node("MatMul", {"x", "wu"}, {"u"});
    b.node("Sigmoid", {"g"}, {"s"});
    b.node("Mul", {"g", "s"}, {"silu"});
    b.node("Mul", {"silu", "u"}, {"y"});
    const std::string path = scratch_dir("swiglu_siblings") + "/model.onnx";
    b.save(path);
    Session fused(load_onnx(path), default_op_registry());
    SessionOptions o;
    o.stop_after_pass = test::pass_index("fuse-swiglu");
    Session plain(load_onnx(path), default_op_registry(), o);
    const std::vector<NamedTensor> in{{"x", tensor({3, 64}, 7)}};
    const Tensor a = fused.run(in)[0], c = plain.run(in)[0];
    CHECK(fused.pass_report().get("swiglu_fused") == (up_n == 96 ? 1 : 0));
    CHECK(fused.pass_report().get("swiglu_refused:shapes_not_known_equal") == (up_n == 96 ? 0 : 1));
    bit_identical(a, c);
  }
}

TEST_CASE("swiglu fusion when the file declares no dtype on the chain (the dtypes inferred)", "[fusion][swiglu]") {
  ModelBuilder b;
  b.input("x", kFloat, {3, 64}).output("z", kFloat, {3, 8});
  b.initializer<float>("wg", kFloat, {64, 96}, randoms(64 * 96, 5));
  b.initializer<float>("wu", kFloat, {64, 96}, randoms(64 * 96, 6));
  b.initializer<float>("wd", kFloat, {96, 8}, randoms(96 * 8, 7));
  b.node("MatMul", {"x", "wg"}, {"g"});
  b.node("MatMul", {"x", "wu"}, {"u"});
  b.node("Sigmoid", {"g"}, {"s"});
  b.node("Mul", {"g", "s"}, {"silu"});
  b.node("Mul", {"silu", "u"}, {"y"});
  b.node("MatMul", {"y", "wd"}, {"z"});
  const Pair p = run_both(b, "swiglu_undeclared", "infer-dtypes", "swiglu_fused", {{"x", tensor({3, 64}, 7)}});
  CHECK(p.count == 1);
  bit_identical(p.fused, p.plain);
}

// Phi-3's MLP (transformers 4.x, opset 14): gate and up are the halves of
// one projection, chunk(2, -1) written from the projection's shape: n =
// Gather(Shape(h), [-1]), half = (n + 1) / 2, Slices [0, half) and
// [half, 2·half). reshaped-dims reads n off the weight, folding makes the
// bounds constants, and the two Slices are proven of equal length.
TEST_CASE("swiglu fusion on the halves of one projection (Phi-3's chunk), bit-identical", "[fusion][swiglu]") {
  for (const int64_t width : {8, 7}) {  // 7: halves of 4 and 3, not fused
    CAPTURE(width);
    ModelBuilder b;
    b.input("x", kFloat, {2, 5, 4}).output("y", kFloat, {2, 5, -1});
    b.initializer<float>("w", kFloat, {4, width}, randoms(static_cast<size_t>(4 * width), 9));
    b.initializer<int64_t>("last", kInt64, {1}, {-1});
    b.initializer<int64_t>("one", kInt64, {1}, {1});
    b.initializer<int64_t>("two", kInt64, {1}, {2});
    b.initializer<int64_t>("zero", kInt64, {1}, {0});
    b.node("MatMul", {"x", "w"}, {"h"});
    b.node("Shape", {"h"}, {"sh"});
    ModelBuilder::attr_int(b.node("Gather", {"sh", "last"}, {"n"}), "axis", 0);
    b.node("Add", {"n", "one"}, {"n1"});
    b.node("Div", {"n1", "two"}, {"half"});
    b.node("Mul", {"half", "one"}, {"end0"});
    b.node("Mul", {"half", "two"}, {"end1"});
    b.node("Slice", {"h", "zero", "end0", "last"}, {"g"});
    b.node("Slice", {"h", "end0", "end1", "last"}, {"u"});
    b.node("Sigmoid", {"g"}, {"s"});
    b.node("Mul", {"g", "s"}, {"silu"});
    b.node("Mul", {"u", "silu"}, {"y"});
    const std::vector<NamedTensor> in{{"x", swiglu_tensor(DType::F32, {2, 5, 4}, 1, 3.f)}};
    if (width == 7) {  // [.., 4] and [.., 3]: nothing fuses, and the Mul fails as written
      Session on = test::session_until(b, "swiglu_chunk_odd");
      CHECK(on.pass_report().get("swiglu_fused") == 0);
      CHECK(on.pass_report().get("swiglu_refused:shapes_not_known_equal") == 1);
      CHECK_THROWS(on.run(in));
      continue;
    }
    const Pair p = run_both(b, "swiglu_chunk", "fuse-swiglu", "swiglu_fused", in);
    CHECK(p.count == 1);
    bit_identical(p.fused, p.plain);
  }
}

TEST_CASE("swiglu fusion must not fire on a broadcast up, a read intermediate or Sigmoid of another value",
          "[fusion][swiglu][must-not-fire]") {
  const Shape shape{2, 5, 96};
  const std::vector<NamedTensor> in{{"g", swiglu_tensor(DType::F32, shape, 1, 3.f)},
                                    {"u", swiglu_tensor(DType::F32, {1, 1, 96}, 2, 3.f)}};
  SECTION("u [1, 1, 96] broadcast over g") {
    const Pair p = run_both(swiglu(kFloat, {2, 5, 96}, {1, 1, 96}, false), "swiglu_bcast", "fuse-swiglu",
                            "swiglu_refused:shapes_not_known_equal", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 3);
    bit_identical(p.fused, p.plain);
  }
  SECTION("symbolic dims of different names are not proven equal") {
    ModelBuilder b = swiglu(kFloat, {-1, 5, 96}, {1, -1, 96}, false);  // sym0 against sym1
    const Pair p = run_both(b, "swiglu_syms", "fuse-swiglu", "swiglu_refused:shapes_not_known_equal",
                            {{"g", swiglu_tensor(DType::F32, {1, 5, 96}, 1, 3.f)},
                             {"u", swiglu_tensor(DType::F32, {1, 5, 96}, 2, 3.f)}});
    CHECK(p.count == 1);
    bit_identical(p.fused, p.plain);
  }
  SECTION("the SiLU is also a graph output") {
    const Pair p = run_both(swiglu(kFloat, {2, 5, 96}, {2, 5, 96}, false, true), "swiglu_silu_out", "fuse-swiglu",
                            "swiglu_refused:intermediate_read_elsewhere",
                            {{"g", swiglu_tensor(DType::F32, shape, 1, 3.f)}, {"u", swiglu_tensor(DType::F32, shape, 2, 3.f)}});
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 3);
    bit_identical(p.fused, p.plain);
  }
  SECTION("gate and up Slices of one x with other bounds: up [.., 1] broadcast over gate [.., 3]") {
    // Two Slices of one value are siblings only with equal bounds: with
    // these, the Mul broadcasts, which the fused kernel does not.
    ModelBuilder b;
    b.input("x", kFloat, {2, 5, 8}).output("y", kFloat, {2, 5, 3});
    b.initializer<int64_t>("s0", kInt64, {1}, {0});
    b.initializer<int64_t>("e0", kInt64, {1}, {3});
    b.initializer<int64_t>("s1", kInt64, {1}, {3});
    b.initializer<int64_t>("e1", kInt64, {1}, {4});
    b.initializer<int64_t>("axis", kInt64, {1}, {-1});
    b.node("Slice", {"x", "s0", "e0", "axis"}, {"g"});
    b.node("Slice", {"x", "s1", "e1", "axis"}, {"u"});
    b.node("Sigmoid", {"g"}, {"s"});
    b.node("Mul", {"g", "s"}, {"silu"});
    b.node("Mul", {"silu", "u"}, {"y"});
    const Pair p = run_both(b, "swiglu_slices", "fuse-swiglu", "swiglu_refused:shapes_not_known_equal",
                            {{"x", swiglu_tensor(DType::F32, {2, 5, 8}, 1, 3.f)}});
    CHECK(p.count == 1);
    bit_identical(p.fused, p.plain);
  }
  SECTION("Mul(h, Sigmoid(g)) with h not g") {
    ModelBuilder b;
    b.input("g", kFloat, {2, 5, 96}).input("h", kFloat, {2, 5, 96}).input("u", kFloat, {2, 5, 96});
    b.output("y", kFloat, {2, 5, 96});
    b.node("Sigmoid", {"g"}, {"s"});
    b.node("Mul", {"h", "s"}, {"silu"});
    b.node("Mul", {"silu", "u"}, {"y"});
    const Pair p = run_both(b, "swiglu_other", "fuse-swiglu", "swiglu_fused",
                            {{"g", swiglu_tensor(DType::F32, shape, 1, 3.f)}, {"h", swiglu_tensor(DType::F32, shape, 3, 3.f)},
                             {"u", swiglu_tensor(DType::F32, shape, 2, 3.f)}});
    CHECK(p.count == 0);
    CHECK(p.fused_nodes == 3);
    bit_identical(p.fused, p.plain);
  }
}

namespace {

// Attention as transformers' eager path exports it, over repeated KV heads:
// GqaMatMul-able Q·Kᵀ, ·scale, + mask, Softmax over the keys, P·V.
// `softmax_op` and `axis` vary the tail for the must-not-fire cases;
// `scores_out` also makes the raw scores a graph output.
// `mask_dims` declares the mask's shape (default [1,1,s,t]); `scores_dims`,
// when given, the scores' (value_info; -1 is a symbolic dim, sym<i> at
// position i). `dtype` 10: a float16 export's, every tensor and the scale
// float16 (`mask_dtype` apart, for the must-not-fire case).
ModelBuilder masked_attention(int64_t kvh, int64_t rep, int64_t s, int64_t t, int64_t d,
                              const char* softmax_op = "Softmax", int64_t axis = -1, bool scores_out = false,
                              std::vector<int64_t> mask_dims = {}, std::vector<int64_t> scores_dims = {},
                              int32_t dtype = kFloat, int32_t mask_dtype = 0, int mask_late = 0,
                              int nan_where = 0) {
  const int64_t h = kvh * rep;
  ModelBuilder b;
  if (mask_late < 4)
    b.input("q", dtype, {1, h, s, d}).input("k", dtype, {1, kvh, t, d}).input("v", dtype, {1, kvh, t, d});
  // mask_late: the mask computed after the scores product, as torch.onnx's
  // TorchScript exporter places each layer's mask (1: Max(mask_in,
  // mask_in)), or a re-sorted file the chain computing it (2: Min(Max(...),
  // Max(...))); 3: that chain reading the scores (+ 0·scores), which cannot
  // move before them. 4 to 7: the mask a Slice of mask_in along axis 3
  // from 0 to a bound read off a shape, as transformers 4.x cuts its
  // causal mask to the keys (4: the keys' dim -2; forms the cut fusion
  // must not take: 5 the bound q's dim 2, 6 the cut mask also a graph
  // output, 7 step 2; 8 a boolean mask_in cut, then Where(cut, 0, -inf)).
  // The lengths are then symbolic: q's S, the keys' T.
  b.input(mask_late ? "mask_in" : "mask", mask_dtype ? mask_dtype : dtype,
          mask_dims.empty() ? std::vector<int64_t>{1, 1, s, t} : mask_dims);
  b.output("y", dtype, {1, h, s, d});
  if (mask_late >= 4) {
    b.input("q", dtype, {1, h, -1, d}).input("k", dtype, {1, kvh, -1, d}).input("v", dtype, {1, kvh, -1, d});
    b.dim_param("q", 2, "S").dim_param("k", 2, "T").dim_param("v", 2, "T").dim_param("y", 2, "S");
  }
  if (mask_late == 6) b.output("mask", dtype, {1, 1, -1, -1});
  if (!scores_dims.empty()) b.declare("scores", dtype, scores_dims);
  if (scores_out) b.output("scores", dtype, {1, h, s, t});
  b.initializer<int64_t>("ax", kInt64, {1}, {2});
  b.initializer<int64_t>("e", kInt64, {5}, {1, kvh, rep, t, d});
  b.initializer<int64_t>("r", kInt64, {4}, {1, h, t, d});
  if (dtype == kFloat) b.initializer<float>("scale", kFloat, {}, {1.0f / std::sqrt(float(d))});
  else b.initializer<uint16_t>("scale", dtype, {}, {float_to_half(1.0f / std::sqrt(float(d)))});
  for (const char* x : {"k", "v"}) {
    const std::string n = x;
    b.node("Unsqueeze", {n, "ax"}, {"u_" + n});
    b.node("Expand", {"u_" + n, "e"}, {"ex_" + n});
    b.node("Reshape", {"ex_" + n, "r"}, {"rep_" + n});
  }
  ModelBuilder::attr_ints(b.node("Transpose", {"rep_k"}, {"kt"}), "perm", {0, 1, 3, 2});
  if (mask_late >= 4) {
    b.initializer<int64_t>("cut_at", kInt64, {}, {mask_late == 5 ? 2 : -2});  // q's rank is not known: from the front
    b.initializer<int64_t>("cut_from", kInt64, {1}, {0});
    b.initializer<int64_t>("cut_axis", kInt64, {1}, {3});
    b.initializer<int64_t>("cut_step", kInt64, {1}, {mask_late == 7 ? 2 : 1});
    b.initializer<int64_t>("front", kInt64, {1}, {0});
    b.node("Shape", {mask_late == 5 ? "q" : "k"}, {"kv_shape"});
    b.node("Gather", {"kv_shape", "cut_at"}, {"keys"});
    b.node("Unsqueeze", {"keys", "front"}, {"cut_to"});
    b.node("Slice", {"mask_in", "cut_from", "cut_to", "cut_axis", "cut_step"}, {mask_late == 8 ? "kept" : "mask"});
    if (mask_late == 8) {  // transformers 4.53: a boolean mask cut, then made float, Where(kept, 0, -inf)
      b.initializer<float>("attend", kFloat, {}, {0.0f});
      b.initializer<float>("ignore", kFloat, {}, {-std::numeric_limits<float>::infinity()});
      b.node("Where", {"kept", "attend", "ignore"}, {"mask"});
    }
  }
  b.node("MatMul", {"q", "kt"}, {"scores"});
  if (mask_late == 1) b.node("Max", {"mask_in", "mask_in"}, {"mask"});
  if (mask_late >= 2 && mask_late <= 3) {
    b.node("Max", {"mask_in", "mask_in"}, {"m1"});
    if (mask_late == 3) {
      b.initializer<float>("nought", kFloat, {}, {0.0f});
      b.node("Mul", {"scores", "nought"}, {"none"});
      b.node("Add", {"m1", "none"}, {"m2"});
    }
    b.node("Min", {"m1", mask_late == 3 ? "m2" : "m1"}, {"mask"});
  }
  b.node("Mul", {"scores", "scale"}, {"scaled"});
  b.node("Add", {"scaled", "mask"}, {"masked"});
  ModelBuilder::attr_int(b.node(softmax_op, {"masked"}, {nan_where ? "p0" : "p"}), "axis", axis);
  // nan_where: Where(IsNaN(P), 0, P), as torch.onnx's TorchScript exporter
  // writes sdpa (1); forms it must not take: a -0 (2), a 0 of shape [1, 1]
  // (3), P also a graph output (4), IsNaN's output also one (5).
  if (nan_where) {
    if (dtype != kFloat) b.initializer<uint16_t>("zero", dtype, {}, {0});
    else if (nan_where == 3) b.initializer<float>("zero", kFloat, {1, 1}, {0.0f});
    else b.initializer<float>("zero", kFloat, {}, {nan_where == 2 ? -0.0f : 0.0f});
    if (nan_where == 4) b.output("p0", dtype, {1, h, s, t});
    if (nan_where == 5) b.output("nan", 9, {1, h, s, t});
    b.node("IsNaN", {"p0"}, {"nan"});
    b.node("Where", {"nan", "zero", "p0"}, {"p"});
  }
  b.node("MatMul", {"p", "rep_v"}, {"y"});
  return b;
}

// A causal mask over the last s of t positions: `masked` above the diagonal;
// with `bias`, the kept keys get a random additive bias instead of 0.
Tensor causal_mask(int64_t s, int64_t t, float masked, bool bias = false) {
  Tensor m = Tensor::allocate(DType::F32, {1, 1, s, t});
  const auto r = randoms(static_cast<size_t>(s * t), 4);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < t; ++j)
      m.data<float>()[i * t + j] = j > t - s + i ? masked : bias ? r[static_cast<size_t>(i * t + j)] : 0.0f;
  return m;
}

}  // namespace

TEST_CASE("masked scores: the mask reaches Q.K^T and the causal half is left out, bit-identical",
          "[fusion][masked_scores]") {
  const float lowest = std::numeric_limits<float>::lowest(), inf = std::numeric_limits<float>::infinity();
  for (float masked : {-inf, lowest, -1e30f})
    for (int64_t past : {0, 9}) {
      const int64_t kvh = 2, rep = 2, s = 70, t = past + s, d = 16;
      const std::vector<NamedTensor> in = {{"q", tensor({1, kvh * rep, s, d}, 1)},
                                           {"k", tensor({1, kvh, t, d}, 2)},
                                           {"v", tensor({1, kvh, t, d}, 3)},
                                           {"mask", causal_mask(s, t, masked)}};
      const Pair p = run_both(masked_attention(kvh, rep, s, t, d), "masked_scores", "masked-scores",
                              "masked_scores_fused", in);
      CHECK(p.count == 1);
      bit_identical(p.fused, p.plain);
    }
}

TEST_CASE("masked scores: a mask computed after the scores product moves before it, bit-identical",
          "[fusion][masked_scores]") {
  const int64_t kvh = 2, rep = 2, s = 70, t = 79, d = 16;
  const std::vector<NamedTensor> in = {{"q", tensor({1, kvh * rep, s, d}, 1)},
                                       {"k", tensor({1, kvh, t, d}, 2)},
                                       {"v", tensor({1, kvh, t, d}, 3)},
                                       {"mask_in", causal_mask(s, t, -1e30f)}};
  for (const int late : {1, 2, 3}) {
    CAPTURE(late);
    const ModelBuilder b = masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {}, {}, kFloat, 0, late);
    const std::string name = "masked_scores_late" + std::to_string(late);
    // 1: the one node; 2: the chain of two; 3: a chain that reads the scores stays
    const Pair hoisted = run_both(b, name, "masked-scores", "mask_nodes_hoisted", in);
    CHECK(hoisted.count == (late == 3 ? 0 : late));
    bit_identical(hoisted.fused, hoisted.plain);
    const Pair fused = run_both(b, name, "masked-scores", "masked_scores_fused", in);
    CHECK(fused.count == (late == 3 ? 0 : 1));
    bit_identical(fused.fused, fused.plain);
  }
}

TEST_CASE("masked scores must not fire when the scores are read elsewhere or the tail is no Softmax over the keys",
          "[fusion][masked_scores][must-not-fire]") {
  const int64_t kvh = 1, rep = 2, s = 40, t = 40, d = 8;
  const std::vector<NamedTensor> in = {{"q", tensor({1, kvh * rep, s, d}, 1)},
                                       {"k", tensor({1, kvh, t, d}, 2)},
                                       {"v", tensor({1, kvh, t, d}, 3)},
                                       {"mask", causal_mask(s, t, -1e30f)}};
  struct Case {
    const char* name;
    ModelBuilder b;
  } cases[] = {{"scores_out", masked_attention(kvh, rep, s, t, d, "Softmax", -1, true)},
               {"log_softmax", masked_attention(kvh, rep, s, t, d, "LogSoftmax")},
               {"axis_2", masked_attention(kvh, rep, s, t, d, "Softmax", 2)}};
  for (const Case& c : cases) {
    INFO(c.name);
    const Pair p = run_both(c.b, std::string("masked_scores_") + c.name, "masked-scores", "masked_scores_fused", in);
    CHECK(p.count == 0);
    bit_identical(p.fused, p.plain);
  }
}

// The kernel alone: which scores it leaves out. Rows go in blocks of 32
// (ops/gqa_matmul.cpp kSkipRows), each computed up to the most keys one of
// its rows keeps; everything computed equals the unmasked product bit for
// bit, everything left out is 0.
TEST_CASE("masked scores: Q.K^T leaves out masked keys only where Softmax cannot tell", "[masked_scores]") {
  using test::OpTest;
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t h = 2, s = 100, past = 5, t = past + s, d = 16, block = 32;
  const Tensor k = tensor({1, h, t, d}, 8);
  auto scores = [&](const Tensor& q, const Tensor* mask) {
    OpTest op("GqaMatMul", 1, "com.onebit");
    op.attr("transB", 1).attr("score_scale", 0.25f).input(q).input(k).omit().omit().omit();
    if (mask) op.input(*mask);
    return op.run1();
  };
  // The mask over head hi's row i, whatever its shape.
  auto left_out = [&](const Tensor& part, const Tensor& whole, std::function<bool(int64_t, int64_t)> whole_row) {
    int64_t zeros = 0, wrong = 0;
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t i0 = i / block * block;
        bool whole_block = false;
        for (int64_t r = i0; r < std::min(s, i0 + block); ++r) whole_block = whole_block || whole_row(hi, r);
        const int64_t e = whole_block ? t : past + std::min(s, i0 + block);
        for (int64_t j = 0; j < t; ++j) {
          const int64_t at = (hi * s + i) * t + j;
          const float got = part.data<float>()[at], want = j < e ? whole.data<float>()[at] : 0.0f;
          zeros += j >= e;
          wrong += std::memcmp(&got, &want, sizeof got) != 0;
        }
      }
    CHECK(wrong == 0);
    return zeros;
  };
  const Tensor q = tensor({1, h, s, d}, 7);
  const Tensor whole = scores(q, nullptr);
  auto none = [](int64_t, int64_t) { return false; };

  Tensor mask = causal_mask(s, t, -inf);
  CHECK(left_out(scores(q, &mask), whole, none) > 0);

  // The same mask with a fifth, leading dim widens the Add's rank (and
  // moves what a Softmax of axis 3 normalises): not rows, computed whole.
  const Tensor rank5 = causal_mask(s, t, -inf).reshaped({1, 1, 1, s, t});
  CHECK(left_out(scores(q, &rank5), whole, [](int64_t, int64_t) { return true; }) == 0);

  // A query this large could lift a masked score to the row's top: its head is computed whole.
  Tensor huge = tensor({1, h, s, d}, 7);
  huge.data<float>()[3 * d] = 1e30f;  // head 0, row 3
  const Tensor huge_whole = scores(huge, nullptr);
  CHECK(left_out(scores(huge, &mask), huge_whole, [](int64_t hi, int64_t) { return hi == 0; }) > 0);

  // A NaN at a row's end counts as kept; a last kept key masked below the
  // floor (-1e28) keeps the whole row: both blocks are computed whole.
  Tensor odd = causal_mask(s, t, -inf);
  odd.data<float>()[0 * t + t - 1] = std::nanf("");
  odd.data<float>()[40 * t + past + 40] = -1e29f;
  CHECK(left_out(scores(q, &odd), whole, [](int64_t, int64_t i) { return i == 0 || i == 40; }) > 0);

  // A mask per head: head 1 unmasked, head 0 causal.
  Tensor per_head = Tensor::allocate(DType::F32, {1, h, s, t});
  for (int64_t i = 0; i < s * t; ++i) {
    per_head.data<float>()[i] = mask.data<float>()[i];
    per_head.data<float>()[s * t + i] = 0.0f;
  }
  CHECK(left_out(scores(q, &per_head), whole, [](int64_t hi, int64_t) { return hi == 1; }) > 0);

  // A mask that is no row view of the scores (keys broadcast) leaves nothing out.
  Tensor keys_broadcast = Tensor::allocate(DType::F32, {1, 1, s, 1});
  std::fill(keys_broadcast.data<float>(), keys_broadcast.data<float>() + s, 0.0f);
  CHECK(left_out(scores(q, &keys_broadcast), whole, [](int64_t, int64_t) { return true; }) == 0);
}

// The scores' scale, mask and Softmax taken into the GqaMatMul: compared
// with the graph stopped after masked-scores (the mask handed over, the
// three nodes still there), bit for bit.
TEST_CASE("scores softmax: scale, mask and Softmax in the scores product, bit-identical",
          "[fusion][scores_softmax]") {
  const float lowest = std::numeric_limits<float>::lowest(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* name;
    int64_t kvh, rep, s, past;
    float masked;
    bool per_head_mask = false;
    bool huge_query = false;  // the bound fails: every row computed whole, in blocks
    bool bias = false;        // kept keys get a random additive bias, not 0
    int64_t d = 16;
  } cases[] = {{"causal -inf", 2, 2, 70, 0, -inf},
               {"causal lowest, past", 2, 2, 70, 9, lowest},
               {"causal -1e30, past", 2, 3, 45, 5, -1e30f},
               {"one KV head (the inner pool)", 1, 4, 40, 3, -inf},
               {"a decode step", 2, 2, 1, 37, -inf},
               {"mask per head", 2, 2, 33, 4, -inf, true},
               {"huge query", 2, 2, 40, 2, -inf, false, true},
               {"a bias on the kept keys, scale 1/sqrt(24)", 2, 2, 50, 6, -inf, false, false, true, 24}};
  for (const Case& c : cases) {
    INFO(c.name);
    const int64_t h = c.kvh * c.rep, s = c.s, t = c.past + s, d = c.d;
    Tensor mask = causal_mask(s, t, c.masked, c.bias);
    if (c.per_head_mask) {  // head 1 unmasked, the others causal
      Tensor m = Tensor::allocate(DType::F32, {1, h, s, t});
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t i = 0; i < s * t; ++i) m.data<float>()[hi * s * t + i] = hi == 1 ? 0.0f : mask.data<float>()[i];
      mask = std::move(m);
    }
    Tensor q = tensor({1, h, s, d}, 1);
    if (c.huge_query) q.data<float>()[5] = 3e38f;  // some of its scores overflow
    const std::vector<NamedTensor> in = {
        {"q", q}, {"k", tensor({1, c.kvh, t, d}, 2)}, {"v", tensor({1, c.kvh, t, d}, 3)}, {"mask", mask}};
    const std::vector<int64_t> mask_dims = c.per_head_mask ? std::vector<int64_t>{1, h, -1, -1}
                                                           : std::vector<int64_t>{1, 1, -1, -1};
    const Pair p = run_both(masked_attention(c.kvh, c.rep, s, t, d, "Softmax", -1, false, mask_dims, {1, h, -1, -1}),
                            "scores_softmax", "masked-scores", "scores_softmax_fused", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 2);  // the scores' GqaMatMul, now with the Mul, Add and Softmax, and P·V
    bit_identical(p.fused, p.plain);
    if (c.huge_query) {
      int64_t nan = 0;
      for (int64_t i = 0; i < p.fused.size(); ++i) nan += std::isnan(p.fused.data<float>()[i]);
      CHECK(nan > 0);  // the overflowed scores reach the output as the unfused chain gives them
    }
  }
}

TEST_CASE("scores softmax on float16: each node's rounding repeated, bit-identical", "[fusion][scores_softmax]") {
  constexpr int32_t kHalf = 10;
  const float lowest16 = -65504.f, inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* name;
    int64_t kvh, rep, s, past;
    float masked;
    float q_scale = 1.f;  // 100: products past float16's range (inf, then NaN rows)
    bool per_head_mask = false;
    bool bias = false;  // kept keys get a random additive bias, not 0
    int64_t d = 16;
    float kept = 0;  // added to the kept keys' mask
  } cases[] = {{"causal float16 lowest, past", 2, 2, 70, 9, lowest16},
               {"causal -inf", 2, 3, 45, 0, -inf},
               {"a decode step", 2, 2, 1, 37, lowest16},
               {"one KV head (the inner pool)", 1, 4, 40, 3, lowest16},
               {"mask per head, a bias on the kept keys", 2, 2, 33, 4, lowest16, 1.f, true, true},
               {"scores past float16's range", 2, 2, 20, 3, lowest16, 100.f},
               {"scale 1/sqrt(24) (inexact in float16)", 2, 2, 50, 6, lowest16, 1.f, false, true, 24},
               // Kept keys masked by -32704, just above the left-out bound
               // (-32768) and far below the kept floor (-8192): scores of
               // ±100 put left-out keys near a row's maximum, so a row
               // must be computed whole.
               {"kept keys below the kept floor", 2, 2, 40, 3, -32768.f, 8.f, false, false, 16, -32704.f}};
  for (const Case& c : cases) {
    INFO(c.name);
    const int64_t h = c.kvh * c.rep, s = c.s, t = c.past + s, d = c.d;
    const Tensor mask32 = causal_mask(s, t, c.masked, c.bias);
    const int64_t mh = c.per_head_mask ? h : 1;
    Tensor mask = Tensor::allocate(DType::F16, {1, mh, s, t});
    for (int64_t hi = 0; hi < mh; ++hi)  // per head: head 1 unmasked, the others as the one mask
      for (int64_t i = 0; i < s * t; ++i)
        mask.data<uint16_t>()[hi * s * t + i] = float_to_half(
            c.per_head_mask && hi == 1 ? 0.0f : mask32.data<float>()[i] + (mask32.data<float>()[i] > c.masked ? c.kept : 0.f));
    const std::vector<NamedTensor> in = {{"q", half_tensor({1, h, s, d}, 1, c.q_scale)},
                                         {"k", half_tensor({1, c.kvh, t, d}, 2, c.q_scale)},
                                         {"v", half_tensor({1, c.kvh, t, d}, 3)},
                                         {"mask", mask}};
    const Pair p = run_both(masked_attention(c.kvh, c.rep, s, t, d, "Softmax", -1, false, {1, mh, -1, -1},
                                             {1, h, -1, -1}, kHalf),
                            "scores_softmax_f16", "masked-scores", "scores_softmax_fused", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 2);  // the scores' GqaMatMul, now with the Mul, Add and Softmax, and P·V
    REQUIRE(p.fused.dtype() == DType::F16);
    REQUIRE(p.fused.shape() == p.plain.shape());
    CHECK(std::memcmp(p.fused.raw(), p.plain.raw(), p.fused.bytes()) == 0);
    if (c.q_scale >= 100.f) {
      int64_t nan = 0;
      for (int64_t i = 0; i < p.fused.size(); ++i) nan += std::isnan(half_to_float(p.fused.data<uint16_t>()[i]));
      CHECK(nan > 0);  // overflowed scores reach the output as the unfused float16 chain gives them
    }
  }
  SECTION("a float32 mask on float16 scores (Add widens them) must not fire") {
    const int64_t kvh = 1, rep = 2, h = 2, s = 6, t = 6, d = 8;
    const std::vector<NamedTensor> in = {{"q", half_tensor({1, h, s, d}, 1)},
                                         {"k", half_tensor({1, kvh, t, d}, 2)},
                                         {"v", half_tensor({1, kvh, t, d}, 3)},
                                         {"mask", causal_mask(s, t, -1e30f)}};
    const std::string path = scratch_dir("scores_softmax_f16_mixed") + "/model.onnx";
    masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {1, 1, s, t}, {1, h, s, t}, kHalf, kFloat).save(path);
    Session fused(load_onnx(path), default_op_registry());
    CHECK(fused.pass_report().get("scores_softmax_fused") == 0);
    CHECK(fused.pass_report().get("scores_softmax_refused:mask_not_the_scores_dtype") == 1);
  }
}

// Float32 scores whose mask is not known to keep their shape fuse with
// mask_any_shape = 1: the kernel checks the mask it is given when planned,
// takes the rows path when it fits and otherwise computes the chain whole,
// the mask broadcast as Add broadcasts it (a keys dim of 1 here; masks that
// widen the scores in the kernel test below). Each bit-identical to the nodes.
TEST_CASE("scores softmax: a mask not known to fit is checked when planned, any shape bit-identical",
          "[fusion][scores_softmax]") {
  const int64_t kvh = 1, rep = 2, h = 2, s = 6, t = 6, d = 8;
  const float inf = std::numeric_limits<float>::infinity();
  auto inputs = [&](Tensor mask) {
    return std::vector<NamedTensor>{{"q", tensor({1, h, s, d}, 1)},
                                    {"k", tensor({1, kvh, t, d}, 2)},
                                    {"v", tensor({1, kvh, t, d}, 3)},
                                    {"mask", std::move(mask)}};
  };
  auto filled = [inf](Shape shape, unsigned seed) {
    Tensor m = tensor(std::move(shape), seed);
    for (int64_t i = 0; i < m.size(); i += 3) m.data<float>()[i] = -inf;  // some keys masked
    return m;
  };
  struct Case {
    const char* name;
    std::vector<int64_t> mask_dims, scores_dims;
  } declared[] = {{"scores not declared", {1, 1, s, t}, {}},
                  {"keys dims not known equal", {1, 1, s, -1}, {1, h, s, t}},
                  {"rows dims not known equal", {1, 1, -1, t}, {1, h, s, t}}};
  for (const Case& c : declared) {
    INFO(c.name);
    const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, c.mask_dims, c.scores_dims),
                            std::string("scores_softmax_any"), "masked-scores", "scores_softmax_fused",
                            inputs(causal_mask(s, t, -inf)));
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 2);
    bit_identical(p.fused, p.plain);
  }
  struct Given {
    const char* name;
    Tensor mask;
  } given[] = {{"rows (the fast path)", causal_mask(s, t, -inf)},
               {"a keys dim of 1", filled({1, 1, s, 1}, 5)},
               {"a row masked whole (NaN rows)", filled({1, 1, 1, t}, 8)}};
  std::fill(given[2].mask.data<float>(), given[2].mask.data<float>() + t, -inf);
  for (bool nan_where : {false, true})
    for (const Given& c : given) {
      INFO(c.name << (nan_where ? ", Where(IsNaN(P), 0, P) taken" : ""));
      const Pair p =
          run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {-1, -1, -1, -1}, {}, kFloat, 0, false,
                                    nan_where),
                   std::string("scores_softmax_given"), "masked-scores", "scores_softmax_fused",
                   inputs(Tensor::clone(c.mask)));
      CHECK(p.count == 1);
      CHECK(p.fused_nodes == 2);  // the IsNaN and Where too
      bit_identical(p.fused, p.plain);
      int64_t nan = 0;
      for (int64_t i = 0; i < p.fused.size(); ++i) nan += std::isnan(p.fused.data<float>()[i]);
      if (nan_where) CHECK(nan == 0);  // a row masked whole is 0, not NaN
      else if (std::string(c.name).find("NaN") != std::string::npos) CHECK(nan > 0);
    }
}

TEST_CASE("scores softmax on float16 with a mask not known to fit: rows or not, each node's rounding, bit-identical",
          "[fusion][scores_softmax]") {
  // An Optimum export converted to float16 declares no mask shape: the
  // rows path when the mask given is rows, else the whole chain rounding
  // to float16 after each node, as the Mul, Add and Softmax nodes do.
  constexpr int32_t kHalf = 10;
  const int64_t kvh = 1, rep = 2, h = 2, s = 6, t = 6, d = 8;
  const float lowest16 = -65504.f;
  auto halves = [](const Tensor& f) {
    Tensor m = Tensor::allocate(DType::F16, f.shape());
    for (int64_t i = 0; i < f.size(); ++i) m.data<uint16_t>()[i] = float_to_half(f.data<float>()[i]);
    return m;
  };
  auto masked_thirds = [&](Shape shape, unsigned seed) {
    Tensor m = tensor(std::move(shape), seed);
    for (int64_t i = 0; i < m.size(); i += 3) m.data<float>()[i] = -std::numeric_limits<float>::infinity();
    return halves(m);
  };
  struct Given {
    const char* name;
    Tensor mask;
  } given[] = {{"rows (the fast path)", halves(causal_mask(s, t, lowest16))},
               {"a keys dim of 1", masked_thirds({1, 1, s, 1}, 5)},
               {"a row masked whole (NaN rows)", masked_thirds({1, 1, 1, t}, 8)}};
  for (int64_t j = 0; j < t; ++j) given[2].mask.data<uint16_t>()[j] = 0xfc00;  // -inf
  for (bool nan_where : {false, true})
    for (const Given& c : given) {
      INFO(c.name << (nan_where ? ", Where(IsNaN(P), 0, P) taken" : ""));
      const std::vector<NamedTensor> in = {{"q", half_tensor({1, h, s, d}, 1)},
                                           {"k", half_tensor({1, kvh, t, d}, 2)},
                                           {"v", half_tensor({1, kvh, t, d}, 3)},
                                           {"mask", Tensor::clone(c.mask)}};
      const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {-1, -1, -1, -1}, {}, kHalf, 0,
                                               false, nan_where),
                              std::string("scores_softmax_given_f16"), "masked-scores", "scores_softmax_fused", in);
      CHECK(p.count == 1);
      CHECK(p.fused_nodes == 2);
      REQUIRE(p.fused.dtype() == DType::F16);
      REQUIRE(p.fused.shape() == p.plain.shape());
      CHECK(std::memcmp(p.fused.raw(), p.plain.raw(), p.fused.bytes()) == 0);
    }
}

// The kernel alone, on masks that widen the scores (the P·V product after
// it would refuse them, so no graph above can): its output against the
// GqaMatMul, Mul, Add and Softmax (and IsNaN, Where) ops one after another.
TEST_CASE("scores softmax: a mask that widens the scores computed as the nodes would (mask_any_shape)",
          "[scores_softmax]") {
  using test::OpTest;
  const int64_t h = 2, s = 5, t = 7, d = 8;
  const float inf = std::numeric_limits<float>::infinity(), sc = 0.375f;
  for (bool nan_to_zero : {false, true})
    for (const Shape& ms : {Shape{2, 1, s, t}, Shape{3, 1, 1, s, t}, Shape{1, h, 1, 1}}) {
      INFO(shape_str(ms) << (nan_to_zero ? ", NaNs to 0" : ""));
      Tensor mask = tensor(ms, 9);
      for (int64_t i = 0; i < mask.size(); i += 4) mask.data<float>()[i] = -inf;
      std::fill(mask.data<float>(), mask.data<float>() + ms.back(), -inf);  // a row masked whole
      const Tensor q = tensor({1, h, s, d}, 1), k = tensor({1, h, t, d}, 2);
      OpTest fused("GqaMatMul", 1, "com.onebit");
      fused.attr("transB", 1).attr("score_scale", sc).attr("softmax", int64_t{1}).attr("mask_any_shape", int64_t{1});
      if (nan_to_zero) fused.attr("nan_to_zero", int64_t{1});
      fused.input(q).input(k).omit().omit().omit().input(mask);
      const Tensor y = fused.run1();

      OpTest scores("GqaMatMul", 1, "com.onebit");
      scores.attr("transB", 1).input(q).input(k);
      Tensor scale = Tensor::allocate(DType::F32, {});
      *scale.data<float>() = sc;
      OpTest mul("Mul");
      const Tensor scaled = mul.input(scores.run1()).input(scale).run1();
      OpTest add("Add");
      const Tensor masked = add.input(scaled).input(mask).run1();
      OpTest softmax("Softmax");
      Tensor want = softmax.attr("axis", int64_t{-1}).input(masked).run1();
      if (nan_to_zero)
        for (int64_t i = 0; i < want.size(); ++i)
          if (std::isnan(want.data<float>()[i])) want.data<float>()[i] = 0.0f;
      REQUIRE(y.shape() == want.shape());
      bit_identical(y, want);
      int64_t nan = 0;
      for (int64_t i = 0; i < y.size(); ++i) nan += std::isnan(y.data<float>()[i]);
      CHECK((nan > 0) == !nan_to_zero);
    }
}

// transformers 4.x cuts its one causal mask to each layer's keys,
// causal_mask[:, :, :, :key_states.shape[-2]]: the fused GqaMatMul takes
// the mask before the cut and the bound's proof in place of the Slice and
// the chain computing it, bit-identical. The mask as long as the keys (a
// step of our generator) or longer (its rows then read in place a
// stride apart), declared or not.
TEST_CASE("cut mask to keys: the Slice of the mask to the keys' count taken into the scores, bit-identical",
          "[fusion][mask_cut]") {
  const int64_t kvh = 2, rep = 2, h = kvh * rep, d = 8;
  const float inf = std::numeric_limits<float>::infinity();
  struct Lengths {
    int64_t s, past, longer;
  } lengths[] = {{6, 0, 0}, {1, 9, 0}, {1, 9, 5}, {6, 3, 2}};
  for (const auto& [s, past, longer] : lengths)
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1, 1, -1, -1}, {-1, -1, -1, -1}}) {
      const int64_t t = past + s;
      INFO("s " << s << " past " << past << " mask longer by " << longer << " dims " << shape_str(dims));
      Tensor mask = causal_mask(s, t + longer, -inf, true);
      const std::vector<NamedTensor> in = {{"q", tensor({1, h, s, d}, 1)},
                                           {"k", tensor({1, kvh, t, d}, 2)},
                                           {"v", tensor({1, kvh, t, d}, 3)},
                                           {"mask_in", std::move(mask)}};
      const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, dims, {}, kFloat, 0, 4),
                              "mask_cut", "cut-mask-to-keys", "mask_cut_fused", in);
      CHECK(p.count == 1);
      CHECK(p.fused_nodes == 2);  // the scores (with the cut) and P·V: the Slice and its bound's chain gone
      CHECK(p.plain_nodes > p.fused_nodes);
      bit_identical(p.fused, p.plain);
    }
}

// transformers 4.53 cuts a boolean mask and makes it float in each layer:
// the Where then reads the uncut mask (it commutes with the cut), the
// scores take the cut, bit-identical.
TEST_CASE("cut mask to keys: a boolean mask cut, then made float by a Where, bit-identical", "[fusion][mask_cut]") {
  const int64_t kvh = 2, rep = 2, h = kvh * rep, d = 8;
  constexpr int32_t kBool = 9;
  struct Lengths {
    int64_t s, past, longer;
  } lengths[] = {{6, 0, 0}, {1, 9, 0}, {1, 9, 5}, {6, 3, 2}};
  for (const auto& [s, past, longer] : lengths) {
    const int64_t t = past + s, keys = t + longer;
    INFO("s " << s << " past " << past << " mask longer by " << longer);
    Tensor kept = Tensor::allocate(DType::Bool, {1, 1, s, keys});
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < keys; ++j) kept.data<uint8_t>()[i * keys + j] = j <= past + i ? 1 : 0;
    const std::vector<NamedTensor> in = {{"q", tensor({1, h, s, d}, 1)},
                                         {"k", tensor({1, kvh, t, d}, 2)},
                                         {"v", tensor({1, kvh, t, d}, 3)},
                                         {"mask_in", std::move(kept)}};
    const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {1, 1, -1, -1}, {}, kFloat,
                                             kBool, 8),
                            "mask_cut_where", "cut-mask-to-keys", "mask_cut_fused", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 3);  // the Where (now of the uncut mask), the scores with the cut, P·V
    bit_identical(p.fused, p.plain);
  }
}

TEST_CASE("cut mask to keys must not fire on a bound not the keys', a cut mask read elsewhere or a step not 1",
          "[fusion][mask_cut][must-not-fire]") {
  const int64_t kvh = 1, rep = 2, h = 2, s = 4, t = 4, d = 8;
  struct Form {
    int form;
    const char* why;
  } forms[] = {{5, "mask_cut_refused:cut_not_to_the_keys"},
               {6, "mask_cut_refused:cut_mask_read_elsewhere"},
               {7, "mask_cut_refused:cut_step_not_1"}};
  for (const Form& f : forms) {
    INFO(f.why);
    const std::vector<NamedTensor> in = {{"q", tensor({1, h, s, d}, 1)},
                                         {"k", tensor({1, kvh, t, d}, 2)},
                                         {"v", tensor({1, kvh, t, d}, 3)},
                                         // step 2 keeps a keys dim of 1 valid (it broadcasts)
                                         {"mask_in", f.form == 7 ? tensor({1, 1, s, 1}, 4) : causal_mask(s, t + 4, -1e30f)}};
    const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {1, 1, -1, -1}, {}, kFloat, 0,
                                             f.form),
                            "mask_cut_not", "cut-mask-to-keys", f.why, in);
    CHECK(p.count == 1);
    bit_identical(p.fused, p.plain);
  }
}

// The kernel alone: mask_to_keys on each axis, against a Slice of the mask
// and the uncut fused node (itself tested against the nodes above). Cut on
// the last axis the rows are read in place, on another the cut is copied;
// a cut that keeps the whole axis, a keys dim of 1 that broadcasts, and an
// axis the mask does not have.
TEST_CASE("GqaMatMul: mask_to_keys is the Slice of the mask to the keys' count", "[mask_cut]") {
  using test::OpTest;
  const int64_t h = 2, s = 5, t = 5, d = 8;  // s = t: a cut of the rows' axis broadcasts too
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor q = tensor({1, h, s, d}, 1), k = tensor({1, h, t, d}, 2);
  auto gqa = [&](const Tensor& mask, int64_t axis, bool cut) {
    OpTest op("GqaMatMul", 1, "com.onebit");
    op.attr("transB", 1).attr("score_scale", 0.5f).attr("softmax", int64_t{1}).attr("mask_any_shape", int64_t{1});
    if (cut) op.attr("mask_to_keys", int64_t{1}).attr("mask_keys_axis", axis);
    op.input(q).input(k).omit().omit().omit().input(mask);
    return op.run1();
  };
  struct Case {
    const char* name;
    Shape mask;
    int64_t axis;
  } cases[] = {{"last axis, longer than the keys", {1, 1, s, t + 3}, 3},
               {"last axis counted from the back", {1, 1, s, t + 3}, -1},
               {"last axis, as long as the keys", {1, 1, s, t}, 3},
               {"a keys dim of 1 (broadcast)", {1, 1, s, 1}, -1},
               {"axis 2 longer than the keys (copied)", {1, h, t + 2, t}, 2},
               {"axis 1, shorter than the keys (kept whole)", {1, h, s, t}, 1}};
  for (const Case& c : cases) {
    INFO(c.name);
    Tensor mask = tensor(c.mask, 7);
    for (int64_t i = 0; i < mask.size(); i += 3) mask.data<float>()[i] = -inf;
    OpTest slice("Slice");
    Tensor from = Tensor::allocate(DType::I64, {1}), to = Tensor::allocate(DType::I64, {1}),
           axes = Tensor::allocate(DType::I64, {1});
    *from.data<int64_t>() = 0, *to.data<int64_t>() = t, *axes.data<int64_t>() = c.axis;
    const Tensor sliced = slice.input(mask).input(from).input(to).input(axes).run1();
    if (std::string(c.name).find("axis 2") != std::string::npos) CHECK(sliced.shape() != mask.shape());
    bit_identical(gqa(mask, c.axis, true), gqa(sliced, c.axis, false));
  }
  Tensor mask = tensor({1, 1, s, t}, 7);
  CHECK_THROWS_WITH(gqa(mask, 4, true), Catch::Contains("mask [1,1,5,5] has no axis 4 to cut to the 5 keys"));
  CHECK_THROWS_WITH(gqa(mask, -5, true), Catch::Contains("has no axis -5"));
}

TEST_CASE("scores softmax must not fire on a mask not known to fit unless over the last axis",
          "[fusion][scores_softmax][must-not-fire]") {
  const int64_t kvh = 1, rep = 2, h = 2, s = 6, t = 6, d = 8;
  const std::vector<NamedTensor> in = {{"q", tensor({1, h, s, d}, 1)},
                                       {"k", tensor({1, kvh, t, d}, 2)},
                                       {"v", tensor({1, kvh, t, d}, 3)},
                                       {"mask", causal_mask(s, t, -1e30f)}};
  SECTION("Softmax axis 3: the last only at rank 4, which an undeclared mask may widen") {
    const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", 3, false, {1, 1, s, -1}, {1, h, s, t}),
                            "scores_softmax_axis3", "masked-scores",
                            "scores_softmax_refused:mask_not_known_to_fit_the_scores", in);
    CHECK(p.count == 1);
    CHECK(p.fused_nodes == 5);  // Q·Kᵀ, Mul, Add, Softmax, P·V
    bit_identical(p.fused, p.plain);
  }
  SECTION("the raw scores are also an output: the mask is not handed over, so nothing fuses") {
    const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, true, {}, {1, h, s, t}),
                            "scores_softmax_out", "masked-scores", "scores_softmax_fused", in);
    CHECK(p.count == 0);
    bit_identical(p.fused, p.plain);
  }
  SECTION("Where(IsNaN(P), 0, P) left as it is: a -0, a 0 of rank 2, P or IsNaN's output read elsewhere") {
    for (int form : {2, 3, 4, 5}) {
      INFO("form " << form);
      const Pair p = run_both(masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {1, 1, s, t}, {1, h, s, t},
                                               kFloat, 0, false, form),
                              "scores_softmax_nan_kept", "masked-scores", "scores_softmax_fused", in);
      CHECK(p.count == 1);  // the scale, mask and Softmax still
      CHECK(p.fused_nodes == 4);  // the scores' GqaMatMul, IsNaN, Where, P·V
      bit_identical(p.fused, p.plain);
    }
  }
}

TEST_CASE("scores softmax: a mask that does not fit the scores as declared is an error naming both shapes",
          "[scores_softmax]") {
  using test::OpTest;
  const int64_t h = 2, s = 4, t = 4, d = 8;
  OpTest op("GqaMatMul", 1, "com.onebit");
  Tensor wide = Tensor::allocate(DType::F32, {2, 1, s, t});  // would widen the scores' batch
  std::fill(wide.data<float>(), wide.data<float>() + wide.size(), 0.0f);
  op.attr("transB", 1).attr("score_scale", 0.5f).attr("softmax", int64_t{1});
  op.input(tensor({1, h, s, d}, 1)).input(tensor({1, h, t, d}, 2)).omit().omit().omit().input(wide);
  CHECK_THROWS_WITH(op.run1(), Catch::Contains("mask [2,1,4,4] does not broadcast into the scores [1,2,4,4]"));

  // Leading 1s past rank 4 would make the unfused Add's output rank 5.
  OpTest op5("GqaMatMul", 1, "com.onebit");
  Tensor rank5 = Tensor::allocate(DType::F32, {1, 1, 1, s, t});
  std::fill(rank5.data<float>(), rank5.data<float>() + rank5.size(), 0.0f);
  op5.attr("transB", 1).attr("score_scale", 0.5f).attr("softmax", int64_t{1});
  op5.input(tensor({1, h, s, d}, 1)).input(tensor({1, h, t, d}, 2)).omit().omit().omit().input(rank5);
  CHECK_THROWS_WITH(op5.run1(), Catch::Contains("mask [1,1,1,4,4] does not broadcast into the scores [1,2,4,4]"));
}

TEST_CASE("masked scores must not fire on a Softmax node with more than one input or output",
          "[fusion][masked_scores][must-not-fire]") {
  const int64_t kvh = 1, rep = 2, s = 6, t = 6, d = 8;
  for (bool extra_output : {false, true}) {
    INFO((extra_output ? "two outputs" : "two inputs"));
    ModelBuilder b = masked_attention(kvh, rep, s, t, d, "Softmax", -1, false, {}, {1, kvh * rep, s, t});
    for (onnx::NodeProto& n : *b.graph().mutable_node())
      if (n.op_type() == "Softmax") {
        if (extra_output) n.add_output("p_extra");
        else n.add_input("mask");
      }
    // Only the pass is asked about: such a Softmax need not run.
    const std::string path =
        scratch_dir(std::string("masked_scores_softmax_") + (extra_output ? "outs" : "ins")) + "/model.onnx";
    b.save(path);
    Graph g = load_onnx(path);
    const SessionOptions options;
    PassReport report;
    ThreadPool pool(1);
    PassContext ctx{options, default_op_registry(), report, pool};
    run_passes(g, ctx);
    CHECK(report.get("masked_scores_fused") == 0);
    CHECK(report.get("scores_softmax_fused") == 0);
  }
}

namespace {

// opset 23's Attention as torch.onnx writes sdpa: 4-D heads, K and V
// repeated by the repeat_kv chain (or read as they are with kvh = h), an
// additive mask, `scale` given or not, and the attributes that keep it whole.
ModelBuilder attention23(int64_t kvh, int64_t rep, int64_t s, int64_t t, int64_t d, bool repeated = true,
                         bool with_scale = true, int64_t is_causal = 0, float softcap = 0.0f, int64_t mask_t = -1) {
  const int64_t h = kvh * rep;
  ModelBuilder b(23);
  b.input("q", kFloat, {1, h, s, d}).input("k", kFloat, {1, kvh, t, d}).input("v", kFloat, {1, kvh, t, d});
  b.input("mask", kFloat, {1, 1, s, mask_t < 0 ? t : mask_t}).output("y", kFloat, {1, h, s, d});
  std::string kk = "k", vv = "v";
  if (repeated) {
    b.initializer<int64_t>("ax", kInt64, {1}, {2});
    b.initializer<int64_t>("e", kInt64, {5}, {1, kvh, rep, t, d});
    b.initializer<int64_t>("r", kInt64, {4}, {1, h, t, d});
    for (const char* x : {"k", "v"}) {
      const std::string n = x;
      b.node("Unsqueeze", {n, "ax"}, {"u_" + n});
      b.node("Expand", {"u_" + n, "e"}, {"ex_" + n});
      b.node("Reshape", {"ex_" + n, "r"}, {"rep_" + n});
    }
    kk = "rep_k", vv = "rep_v";
  }
  auto& a = b.node("Attention", {"q", kk, vv, "mask"}, {"y"});
  if (with_scale) {
    auto* at = a.add_attribute();
    at->set_name("scale");
    at->set_type(onnx::AttributeProto::FLOAT);
    at->set_f(0.3f);
  }
  if (is_causal) ModelBuilder::attr_int(a, "is_causal", is_causal);
  if (softcap != 0.0f) {
    auto* at = a.add_attribute();
    at->set_name("softcap");
    at->set_type(onnx::AttributeProto::FLOAT);
    at->set_f(softcap);
  }
  return b;
}

std::vector<NamedTensor> attention23_inputs(int64_t kvh, int64_t rep, int64_t s, int64_t t, int64_t d,
                                            int64_t mask_t = -1) {
  return {{"q", tensor({1, kvh * rep, s, d}, 1)},
          {"k", tensor({1, kvh, t, d}, 2)},
          {"v", tensor({1, kvh, t, d}, 3)},
          {"mask", causal_mask(s, mask_t < 0 ? t : mask_t, -std::numeric_limits<float>::infinity())}};
}

double worst_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return worst;
}

}  // namespace

TEST_CASE("split attention: opset 23 Attention becomes the eager products over the unrepeated cache",
          "[fusion][attention_split]") {
  for (bool repeated : {true, false})
    for (bool with_scale : {true, false})
      for (int64_t s : {1, 40}) {
        const int64_t kvh = 2, rep = repeated ? 3 : 1, t = s + 7, d = 16;
        INFO((repeated ? "repeated" : "plain") << (with_scale ? ", scale given" : ", default scale") << ", S " << s);
        const Pair p = run_both(attention23(kvh, rep, s, t, d, repeated, with_scale), "attention23", "split-attention",
                                "attention_split", attention23_inputs(kvh, rep, s, t, d));
        CHECK(p.count == 1);
        CHECK(worst_diff(p.fused, p.plain) < 1e-5);
      }
}

TEST_CASE("split attention must not fire on a causal flag, a softcap or a mask shorter than the keys",
          "[fusion][attention_split][must-not-fire]") {
  const int64_t kvh = 1, rep = 2, s = 5, t = 9, d = 8;
  for (int variant : {0, 1, 2}) {
    INFO((variant == 0 ? "is_causal" : variant == 1 ? "softcap" : "short mask"));
    const int64_t mask_t = variant == 2 ? t - 2 : -1;  // Attention pads it with -inf; Add would not
    const Pair p = run_both(attention23(kvh, rep, s, t, d, true, true, variant == 0 ? 1 : 0, variant == 1 ? 2.5f : 0.0f,
                                        mask_t),
                            "attention23_whole", "split-attention", "attention_split",
                            attention23_inputs(kvh, rep, s, t, d, mask_t));
    CHECK(p.count == 0);
    bit_identical(p.fused, p.plain);
  }
}
