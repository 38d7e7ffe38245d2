// The KV state (graph/passes/kv_state.cpp, ops/kv_append.cpp): one attention layer
// in the form transformers exports it (cache Concat, repeat_kv, Q·Kᵀ,
// Softmax, P·V), run step by step twice: as exported, feeding `present` back
// as `past`, and with the session keeping the cache (shape-only `past`). The
// attention outputs must be bit-identical at every step: prefill, one-token
// steps, two-token steps, and across the state's growth. Refusals leave the
// graph as it was.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "graph/kernel.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/op_registry.h"
#include "graph/session.h"
#include "model_builder.h"
#include "op_test_util.h"
#include "ops/register_ops.h"
#include "pass_test_util.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7, kHalf = 10;
constexpr int64_t kKvHeads = 2, kRep = 2, kHeadDim = 8, kModel = 16;

std::vector<float> weights(size_t n, int seed) {
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>((i * (7 + seed) + seed) % 17) / 8.f - 1.f;
  return w;
}

enum class Cache { Stacked, PerLayer };

// x [1,S,16] -> attention over past + new (2 KV heads of 8, 4 query heads)
// -> y [1,4,S,8], and the cache after the step.
// Extra::Mask instead scales and masks the scores (a graph input mask [1, 1,
// S, T]) before the Softmax, as transformers' eager attention does; the
// masked-scores fusions then make the Q·Kᵀ node that whole chain.
// Extra::HeadSize reads the head size off the new cache, the concat along
// axis -2, as torch.onnx's TorchScript exporter writes it: Gather(Shape(K),
// 3), Cast and Mul into y (y · d / d).
enum class Extra { None, Cache, Present, Mask, HeadSize };

// rep = 1 is multi-head attention: transformers exports no repeat_kv then,
// and attention reads the cache through a Transpose and plain MatMuls.
// dtype kHalf: a float16 export's (activations, weights, cache, mask and
// scale float16; Extra::None and Extra::Mask only). cast_io (per layer,
// float16): the cache inputs and outputs float32 around float16 Concats,
// past → Cast → Concat → Cast → present, the past length read off the
// first Cast, as an export converted to float16 keeping its inputs' and
// outputs' types writes it (transformers.js' model_fp16.onnx).
ModelBuilder attention(Cache cache, Extra extra, int64_t rep = kRep, int32_t dtype = kFloat, bool cast_io = false) {
  ModelBuilder b;
  const int64_t h = kKvHeads * rep;
  b.input("x", dtype, {1, -1, kModel}).output("y", dtype, {1, h, -1, kHeadDim});
  auto weight = [&](const char* name, int64_t n, int seed) {
    const std::vector<float> w = weights(size_t(kModel * n), seed);
    if (dtype == kFloat) return void(b.initializer<float>(name, kFloat, {kModel, n}, w));
    std::vector<uint16_t> halves(w.size());
    for (size_t i = 0; i < w.size(); ++i) halves[i] = float_to_half(w[i]);
    b.initializer<uint16_t>(name, kHalf, {kModel, n}, halves);
  };
  weight("Wq", h * kHeadDim, 1);
  weight("Wk", kKvHeads * kHeadDim, 2);
  weight("Wv", kKvHeads * kHeadDim, 3);
  b.initializer<int64_t>("q_shape", kInt64, {4}, {1, -1, h, kHeadDim});
  b.initializer<int64_t>("kv_shape", kInt64, {4}, {1, -1, kKvHeads, kHeadDim});
  b.initializer<int64_t>("i0", kInt64, {1}, {0});
  b.initializer<int64_t>("i1", kInt64, {1}, {1});
  b.initializer<int64_t>("i2", kInt64, {1}, {2});
  b.initializer<int64_t>("i3", kInt64, {1}, {3});
  b.initializer<int64_t>("e_head", kInt64, {3}, {1, kKvHeads, rep});
  b.initializer<int64_t>("r_head", kInt64, {2}, {1, h});
  b.initializer<int64_t>("d", kInt64, {1}, {kHeadDim});
  auto heads = [&](const std::string& w, const std::string& shape, const std::string& out) {
    b.node("MatMul", {"x", w}, {out + "_p"});
    b.node("Reshape", {out + "_p", shape}, {out + "_r"});
    ModelBuilder::attr_ints(b.node("Transpose", {out + "_r"}, {out}), "perm", {0, 2, 1, 3});
  };
  heads("Wq", "q_shape", "q");
  heads("Wk", "kv_shape", "k_new");
  heads("Wv", "kv_shape", "v_new");

  std::string past_len_of;
  if (cache == Cache::Stacked) {
    b.input("past", dtype, {2, 1, kKvHeads, -1, kHeadDim}).output("present", dtype, {2, 1, kKvHeads, -1, kHeadDim});
    for (int j = 0; j < 2; ++j) {
      const std::string kv = j == 0 ? "k" : "v";
      b.node("Slice", {"past", j == 0 ? "i0" : "i1", j == 0 ? "i1" : "i2", "i0"}, {kv + "_slice"});
      b.node("Squeeze", {kv + "_slice", "i0"}, {kv + "_past"});
    }
    b.node("Shape", {"past"}, {"past_shape"});
    b.node("Gather", {"past_shape", "i3"}, {"past_len"});
  } else {
    const int32_t io = cast_io ? kFloat : dtype;
    b.input("past_k", io, {1, kKvHeads, -1, kHeadDim}).input("past_v", io, {1, kKvHeads, -1, kHeadDim});
    b.output("present_k", io, {1, kKvHeads, -1, kHeadDim}).output("present_v", io, {1, kKvHeads, -1, kHeadDim});
    if (cast_io)
      for (const std::string kv : {"k", "v"})
        ModelBuilder::attr_int(b.node("Cast", {"past_" + kv}, {"past_" + kv + "16"}), "to", dtype);
    b.node("Shape", {cast_io ? "past_k16" : "past_k"}, {"past_shape"});
    b.node("Gather", {"past_shape", "i2"}, {"past_len"});
  }
  std::string k_heads = "k_rep", v_heads = "v_rep";  // K and V as attention reads them
  for (const std::string kv : {"k", "v"}) {
    const std::string past = cache == Cache::Stacked ? kv + "_past" : cast_io ? "past_" + kv + "16" : "past_" + kv;
    const std::string cat = cache == Cache::Stacked ? kv + "_cat" : cast_io ? kv + "_cat16" : "present_" + kv;
    ModelBuilder::attr_int(b.node("Concat", {past, kv + "_new"}, {cat}), "axis", extra == Extra::HeadSize ? -2 : 2);
    if (cast_io) ModelBuilder::attr_int(b.node("Cast", {cat}, {"present_" + kv}), "to", kFloat);
    if (rep == 1) {
      (kv == "k" ? k_heads : v_heads) = cat;
      continue;
    }
    b.node("Unsqueeze", {cat, "i2"}, {kv + "_u"});
    b.node("Expand", {kv + "_u", "e"}, {kv + "_e"});
    b.node("Reshape", {kv + "_e", "r"}, {kv + "_rep"});
  }
  // e = [1, kvh, rep, T, d], r = [1, h, T, d] with T = past + S.
  b.node("Shape", {"x"}, {"x_shape"});
  b.node("Gather", {"x_shape", "i1"}, {"s"});
  b.node("Add", {"past_len", "s"}, {"t"});
  ModelBuilder::attr_int(b.node("Concat", {"e_head", "t", "d"}, {"e"}), "axis", 0);
  ModelBuilder::attr_int(b.node("Concat", {"r_head", "t", "d"}, {"r"}), "axis", 0);
  ModelBuilder::attr_ints(b.node("Transpose", {k_heads}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"q", "kt"}, {"scores"});
  if (extra == Extra::Mask) {
    b.input("mask", dtype, {1, 1, -1, -1}).declare("scores", dtype, {1, h, -1, -1});
    // S and T by names of their own (the past's dim 3 is sym3 too).
    auto name_dims = [](onnx::ValueInfoProto& v) {
      auto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
      shape->mutable_dim(2)->set_dim_param("seq");
      shape->mutable_dim(3)->set_dim_param("total");
    };
    name_dims(*b.graph().mutable_input(b.graph().input_size() - 1));
    name_dims(*b.graph().mutable_value_info(b.graph().value_info_size() - 1));
    if (dtype == kFloat) b.initializer<float>("scale", kFloat, {}, {0.35f});
    else b.initializer<uint16_t>("scale", kHalf, {}, {float_to_half(0.35f)});
    b.node("Mul", {"scores", "scale"}, {"scaled"});
    b.node("Add", {"scaled", "mask"}, {"masked"});
    ModelBuilder::attr_int(b.node("Softmax", {"masked"}, {"p"}), "axis", -1);
  } else {
    ModelBuilder::attr_int(b.node("Softmax", {"scores"}, {"p"}), "axis", -1);
  }
  b.node("MatMul", {"p", v_heads}, {extra == Extra::HeadSize ? "y0" : "y"});
  if (extra == Extra::HeadSize) {
    b.initializer<int64_t>("i3s", kInt64, {}, {3});
    b.initializer<float>("inv_d", kFloat, {}, {1.0f / kHeadDim});
    b.node("Shape", {cache == Cache::Stacked ? "k_cat" : "present_k"}, {"k_shape"}, "head_size_shape");
    b.node("Gather", {"k_shape", "i3s"}, {"head_size"});
    ModelBuilder::attr_int(b.node("Cast", {"head_size"}, {"head_size_f"}), "to", kFloat);
    b.node("Mul", {"y0", "head_size_f"}, {"y1"});
    b.node("Mul", {"y1", "inv_d"}, {"y"});
  }
  if (cache == Cache::Stacked) {
    b.node("Unsqueeze", {"k_cat", "i0"}, {"k_stack"});
    b.node("Unsqueeze", {"v_cat", "i0"}, {"v_stack"});
    ModelBuilder::attr_int(b.node("Concat", {"k_stack", "v_stack"}, {"present"}), "axis", 0);
  }
  if (extra == Extra::Cache || extra == Extra::Present) {  // something else reads the cache, or the stacked present
    const std::string read = extra == Extra::Present ? "present" : cache == Cache::Stacked ? "k_cat" : "present_k";
    b.output("k_sum", kFloat, {});
    ModelBuilder::attr_int(b.node("ReduceSum", {read}, {"k_sum"}), "keepdims", 0);
  }
  return b;
}

// eighths: inputs on a grid of 1/8, so with the weights' eighths every key
// and value is a multiple of 1/64 below 16 in magnitude, exact in float16.
// half: float16 x, for a float16 export.
Tensor input_x(int64_t s, int step, bool eighths = false, bool half = false) {
  Tensor t = Tensor::allocate(half ? DType::F16 : DType::F32, {1, s, kModel});
  for (int64_t i = 0; i < t.size(); ++i) {
    const float x = eighths ? static_cast<float>((i * 13 + step * 7) % 17) / 8.f - 1.f
                            : static_cast<float>((i * 13 + step * 7) % 19) / 9.f - 1.f;
    if (half) t.data<uint16_t>()[i] = float_to_half(x);
    else t.data<float>()[i] = x;
  }
  return t;
}

Shape past_shape(Cache cache, int64_t p) {
  return cache == Cache::Stacked ? Shape{2, 1, kKvHeads, p, kHeadDim} : Shape{1, kKvHeads, p, kHeadDim};
}

std::vector<std::string> past_names(Cache cache) {
  return cache == Cache::Stacked ? std::vector<std::string>{"past"} : std::vector<std::string>{"past_k", "past_v"};
}

int index_of(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

Session open(Cache cache, Extra extra, bool state, const std::string& name, int64_t rep = kRep,
             bool patch_plans = true, DType kv_dtype = DType::Undefined) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  attention(cache, extra, rep).save(path);
  SessionOptions o;
  if (state) o.kv_state_inputs = past_names(cache);
  o.patch_plans = patch_plans;
  o.kernel.kv_dtype = kv_dtype;
  return Session(load_onnx(path), default_op_registry(), o);
}

// Bit-identical when both sides run the same kernels (GQA); within float
// summation order when the plain side runs MatMul (multi-head).
void require_same(const Tensor& a, const Tensor& b, bool exact) {
  REQUIRE(a.shape() == b.shape());
  if (exact) {
    REQUIRE(std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
    return;
  }
  for (int64_t i = 0; i < a.size(); ++i) REQUIRE(a.data<float>()[i] == Approx(b.data<float>()[i]).margin(1e-6));
}

// Steps of S new positions each; the plain session is fed its own present.
void decode_both(Session& plain, Session& state, Cache cache, const std::vector<int64_t>& steps, bool exact = true,
                 bool eighths = false) {
  const auto names = past_names(cache);
  const auto outs = plain.output_names();
  std::vector<Tensor> past;
  int64_t p = 0;
  for (size_t step = 0; step < steps.size(); ++step) {
    INFO("step " << step << ", past " << p << ", S " << steps[step]);
    const Tensor x = input_x(steps[step], static_cast<int>(step), eighths);
    std::vector<NamedTensor> a{{"x", x}}, b{{"x", x}};
    for (size_t i = 0; i < names.size(); ++i) {
      a.push_back({names[i], p == 0 ? Tensor(DType::F32, past_shape(cache, 0), nullptr) : past[i]});
      b.push_back({names[i], Tensor(DType::F32, past_shape(cache, p), nullptr)});
    }
    const std::vector<Tensor> ya = plain.run(a), yb = state.run(b);
    require_same(ya[0], yb[0], exact);
    past.clear();
    for (const std::string& present : cache == Cache::Stacked ? std::vector<std::string>{"present"}
                                                              : std::vector<std::string>{"present_k", "present_v"})
      past.push_back(ya[static_cast<size_t>(index_of(outs, present))]);
    p += steps[step];
  }
}

}  // namespace

TEST_CASE("kv state: attention is bit-identical to the exported cache, step by step", "[kv_state]") {
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session plain = open(cache, Extra::None, false, "kv_plain"), state = open(cache, Extra::None, true, "kv_state");
    CHECK(plain.pass_report().get("kv_state") == 0);
    REQUIRE(state.pass_report().get("kv_state") == 2);
    CHECK(state.output_names() == std::vector<std::string>{"y"});
    CHECK(state.options().kernel.kv_dtype == DType::F32);  // the model's own: its cache inputs are float32
    // Prefill of 5 (the packed GEMM path), one-token and two-token steps
    // (the dot path), past the state's first capacity (it grows).
    decode_both(plain, state, cache, {5, 1, 1, 2, 1, 7, 1, 1, 1, 1, 1, 1, 1, 1});
    // A new sequence starts again from an empty past.
    decode_both(plain, state, cache, {3, 1, 1});
  }
}

// A Shape read of the cache's head size (TorchScript exports read it each
// layer, each step): once the KV state stands it is read as the number the
// new positions' Reshape fixes (graph/passes/proven_dims.h, KvAppend), so
// no step evaluates it again. Bit-identical to the exported cache.
TEST_CASE("kv state: the cache's head size read off its Shape is a constant, not a step's fold", "[kv_state]") {
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session plain = open(cache, Extra::HeadSize, false, "kv_head_plain");
    Session state = open(cache, Extra::HeadSize, true, "kv_head_state");
    REQUIRE(state.pass_report().get("kv_state") == 2);
    CHECK(state.pass_report().get("reshaped_dims_read") == 1);
    auto reads_shape = [](const Session& s) {
      bool found = false;
      for (const Node& n : s.graph().nodes) found |= n.name == "head_size_shape";
      return found;
    };
    CHECK_FALSE(reads_shape(state));
    CHECK(reads_shape(plain));  // the Concat along -2 of a cache of unknown rank: not read before the state
    decode_both(plain, state, cache, {5, 1, 1, 2, 1, 1});
  }
}

TEST_CASE("kv state: multi-head attention (no repeat_kv) reads the cache in place too", "[kv_state]") {
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session plain = open(cache, Extra::None, false, "kv_mha_plain", 1);
    Session state = open(cache, Extra::None, true, "kv_mha_state", 1);
    REQUIRE(state.pass_report().get("kv_state") == 2);
    CHECK(state.pass_report().get("gqa_fused") == 0);
    decode_both(plain, state, cache, {5, 1, 1, 2, 1, 7, 1, 1, 1, 1}, false);
  }
}

TEST_CASE("kv state in float16: exact where float16 holds the keys and values, rounded otherwise", "[kv_state][kv_f16]") {
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session plain = open(cache, Extra::None, false, "kv16_plain");
    Session half = open(cache, Extra::None, true, "kv16_state", kRep, true, DType::F16);
    REQUIRE(half.pass_report().get("kv_state") == 2);
    // Keys and values float16 represents: the same bits as the exported
    // cache, through prefill, decode steps, multi-token steps and growth.
    decode_both(plain, half, cache, {5, 1, 1, 2, 1, 7, 1, 1, 1, 1, 1, 1, 1, 1}, true, true);
    // Others: each stored position rounded once, so close to float32 but not the same.
    Session half2 = open(cache, Extra::None, true, "kv16_state2", kRep, true, DType::F16);
    Session full2 = open(cache, Extra::None, true, "kv32_state2");
    const auto names = past_names(cache);
    double max_diff = 0;
    int64_t p = 0;
    for (int64_t n : {6, 1, 1, 3, 1}) {
      std::vector<NamedTensor> in{{"x", input_x(n, static_cast<int>(p))}};
      for (const std::string& name : names) in.push_back({name, Tensor(DType::F32, past_shape(cache, p), nullptr)});
      const Tensor a = half2.run(in)[0], b = full2.run(in)[0];
      for (int64_t i = 0; i < a.size(); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
      p += n;
    }
    CHECK(max_diff > 0);
    CHECK(max_diff < 2e-2);
  }
}

TEST_CASE("kv state through Casts: a float16 cache between float32 inputs and outputs, kept in float16",
          "[kv_state][kv_f16]") {
  // past → Cast → Concat → Cast → present: the session keeps the Concats'
  // float16 cache (the model's own, as `auto` resolves it), the Casts and
  // the present outputs gone; y bit-identical to the graph fed its present.
  const std::string path = scratch_dir("kv_cast_io") + "/model.onnx";
  attention(Cache::PerLayer, Extra::None, kRep, kHalf, true).save(path);
  SessionOptions o;
  o.kv_state_inputs = past_names(Cache::PerLayer);
  Session state(load_onnx(path), default_op_registry(), o);
  Session plain(load_onnx(path), default_op_registry());
  REQUIRE(state.pass_report().get("kv_state") == 2);
  CHECK(state.options().kernel.kv_dtype == DType::F16);
  for (const Node& n : state.graph().nodes) CHECK(n.op_type != "Cast");
  CHECK(state.output_names() == std::vector<std::string>{"y"});
  std::vector<Tensor> past(2, Tensor(DType::F32, past_shape(Cache::PerLayer, 0), nullptr));
  int64_t p = 0;
  int seed = 0;
  for (const int64_t n : {5, 1, 1, 3, 1, 40}) {
    INFO("past " << p << ", " << n << " new");
    const Tensor x = input_x(n, seed++, false, true);
    const std::vector<Tensor> ya = plain.run({{"x", x}, {"past_k", past[0]}, {"past_v", past[1]}});
    const std::vector<Tensor> yb =
        state.run({{"x", x},
                   {"past_k", Tensor(DType::F32, past_shape(Cache::PerLayer, p), nullptr)},
                   {"past_v", Tensor(DType::F32, past_shape(Cache::PerLayer, p), nullptr)}});
    REQUIRE(yb[0].dtype() == DType::F16);
    require_same(ya[0], yb[0], true);
    const auto outs = plain.output_names();
    past = {ya[static_cast<size_t>(index_of(outs, "present_k"))], ya[static_cast<size_t>(index_of(outs, "present_v"))]};
    REQUIRE(past[0].dtype() == DType::F32);
    p += n;
  }
}

TEST_CASE("kv state in int8: each position quantized once, close to float32, through steps and growth",
          "[kv_state][kv_q8]") {
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session q8 = open(cache, Extra::None, true, "kv8_state", kRep, true, DType::I8);
    Session full = open(cache, Extra::None, true, "kv32_state8");
    REQUIRE(q8.pass_report().get("kv_state") == 2);
    const auto names = past_names(cache);
    double max_diff = 0, max_abs = 0;
    int64_t p = 0;
    for (int64_t n : {6, 1, 1, 3, 1, 9, 1, 1}) {  // prefill, steps, multi-token steps, growth past the first capacity
      std::vector<NamedTensor> in{{"x", input_x(n, static_cast<int>(p))}};
      for (const std::string& name : names) in.push_back({name, Tensor(DType::F32, past_shape(cache, p), nullptr)});
      const Tensor a = q8.run(in)[0], b = full.run(in)[0];
      REQUIRE(a.shape() == b.shape());
      for (int64_t i = 0; i < a.size(); ++i) {
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
        max_abs = std::max(max_abs, static_cast<double>(std::fabs(b.data<float>()[i])));
      }
      p += n;
    }
    INFO("max |int8 - float32| " << max_diff << " of outputs up to " << max_abs);
    CHECK(max_diff > 0);
    CHECK(max_diff < 0.02 * max_abs);
  }
}

TEST_CASE("kv state: a past longer than the state holds is an error", "[kv_state]") {
  Session s = open(Cache::Stacked, Extra::None, true, "kv_mismatch");
  auto run = [&](int64_t p, int64_t n) {
    return s.run({{"x", input_x(n, 0)}, {"past", Tensor(DType::F32, past_shape(Cache::Stacked, p), nullptr)}});
  };
  run(0, 4);
  run(4, 1);
  CHECK_THROWS_WITH(run(6, 1), Catch::Contains("holds 5 positions but the past is 6"));
}

TEST_CASE("kv state: a shorter past takes the later positions back", "[kv_state]") {
  // Lookup decoding verifies drafted tokens in one pass and keeps only those
  // it accepts: the next pass passes the shorter past. The result must be
  // the run that never saw the rejected positions.
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session rewound = open(cache, Extra::None, true, "kv_rewound"), straight = open(cache, Extra::None, true, "kv_straight");
    auto run = [&](Session& s, int64_t p, int64_t n, int seed) {
      std::vector<NamedTensor> in{{"x", input_x(n, seed)}};
      for (const std::string& name : past_names(cache)) in.push_back({name, Tensor(DType::F32, past_shape(cache, p), nullptr)});
      return s.run(in);
    };
    run(rewound, 0, 4, 0);
    run(rewound, 4, 3, 1);  // positions 4..6, then taken back to 5
    run(straight, 0, 4, 0);
    run(straight, 4, 1, 1);
    require_same(run(rewound, 5, 2, 2)[0], run(straight, 5, 2, 2)[0], true);
    require_same(run(rewound, 7, 1, 3)[0], run(straight, 7, 1, 3)[0], true);
  }
}

TEST_CASE("kv state must not fire when something else reads the cache", "[kv_state][must-not-fire]") {
  for (Cache cache : {Cache::Stacked, Cache::PerLayer})
    for (Extra extra : {Extra::Cache, Extra::Present}) {
      if (cache == Cache::PerLayer && extra == Extra::Present) continue;  // the same as Extra::Cache there
      Session s = open(cache, extra, true, "kv_extra");
      CHECK(s.pass_report().get("kv_state") == 0);
      CHECK(s.pass_report().get("kv_state_refused") == 1);
      CHECK(index_of(s.output_names(), cache == Cache::Stacked ? "present" : "present_k") >= 0);
    }
  SessionOptions o;  // names an input the graph does not have
  const std::string path = scratch_dir("kv_noinput") + "/model.onnx";
  attention(Cache::Stacked, Extra::None).save(path);
  o.kv_state_inputs = {"past_key_values.0.key"};
  Session s(load_onnx(path), default_op_registry(), o);
  CHECK(s.pass_report().get("kv_state") == 0);
  CHECK(s.pass_report().get("kv_state_refused") == 1);
  o.kv_state_inputs = {"past"};  // and ONEBIT_KV_STATE=0
  o.kv_state = false;
  Session off(load_onnx(path), default_op_registry(), o);
  CHECK(off.pass_report().get("kv_state") == 0);
}

TEST_CASE("plan patching: a decode loop reuses the reserved plan and runs bit-identically", "[kv_state][plan]") {
  // Planner::patch moves the plan reserved for the last step to each
  // smaller step (only the nodes the past length reaches are reshaped);
  // the outputs must be those of plans built afresh for every shape.
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    Session patched = open(cache, Extra::None, true, "kv_patched");
    Session fresh = open(cache, Extra::None, true, "kv_fresh", kRep, false);
    auto inputs = [&](int64_t p, int64_t n, int seed) {
      std::vector<NamedTensor> in{{"x", input_x(n, seed)}};
      for (const std::string& name : past_names(cache)) in.push_back({name, Tensor(DType::F32, past_shape(cache, p), nullptr)});
      return in;
    };
    for (Session* s : {&patched, &fresh}) {
      s->reserve(inputs(0, 5, 0));
      s->reserve(inputs(40, 1, 0));  // the last step
    }
    const int64_t built = patched.stats().plans_built;
    // A prefill, one-token steps, a two-token step (a lookup draft), a step
    // taken back (a shorter past), then past the reserved size (a new build).
    const std::vector<std::pair<int64_t, int64_t>> steps{{0, 5}, {5, 1}, {6, 1}, {7, 2}, {9, 1}, {10, 1},
                                                         {8, 1}, {9, 1}, {10, 1}, {11, 1}, {12, 3}, {15, 1},
                                                         {16, 1}, {17, 30}, {47, 1}};
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto [p, n] = steps[i];
      INFO("step " << i << ": past " << p << ", " << n << " new");
      require_same(patched.run(inputs(p, n, static_cast<int>(i)))[0], fresh.run(inputs(p, n, static_cast<int>(i)))[0],
                   true);
    }
    CHECK(fresh.stats().plans_patched == 0);
    // Built: the 2-, 3- and 30-token steps (more rows than any kept plan)
    // and the last (past beyond the reserve); every other step but the
    // prefill (the reserved shapes themselves) was patched.
    CHECK(patched.stats().plans_built - built == 4);
    CHECK(patched.stats().plans_patched == static_cast<int64_t>(steps.size()) - 1 - 4);
  }
}

namespace {

// x's length L reaches, folded each step: Shape -> Gather -> Unsqueeze ->
// Cast -> Add(z, L), a static node whose reshape reads shapes only (not
// reshaped: it runs on the new L); Concat -> Reshape(x, [L, 1]), a view
// whose reshape reads the shape's data; Div(L, 4) -> Expand(w, [L / 4]),
// whose data changes every fourth step.
std::string data_only_model() {
  ModelBuilder b;
  b.input("x", kFloat, {1, -1}).input("z", kFloat, {1, 4}).input("w", kFloat, {1});
  b.output("y1", kFloat, {1, 4}).output("y2", kFloat, {-1, 1}).output("y3", kFloat, {-1});
  b.initializer<int64_t>("i1", kInt64, {}, {1});
  b.initializer<int64_t>("i0", kInt64, {1}, {0});
  b.initializer<int64_t>("one", kInt64, {1}, {1});
  b.initializer<int64_t>("four", kInt64, {1}, {4});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "i1"}, {"len"});
  b.node("Unsqueeze", {"len", "i0"}, {"len1"});
  ModelBuilder::attr_int(b.node("Cast", {"len1"}, {"lenf"}), "to", kFloat);
  b.node("Add", {"z", "lenf"}, {"y1"});
  ModelBuilder::attr_int(b.node("Concat", {"len1", "one"}, {"shp"}), "axis", 0);
  b.node("Reshape", {"x", "shp"}, {"y2"});
  b.node("Div", {"len1", "four"}, {"q"});
  b.node("Expand", {"w", "q"}, {"y3"});
  const std::string path = scratch_dir("plan_data_only") + "/model.onnx";
  b.save(path);
  return path;
}

// data_only_model at lengths 4..12 and back to 7 after a reserve for 12,
// patched (and grown as the step before with `regrow`) and afresh: the
// same outputs at every length. Returns the patched session's stats.
Session::Stats data_only_steps(bool regrow) {
  const std::string path = data_only_model();
  auto open_session = [&](bool patch) {
    SessionOptions o;
    o.patch_plans = patch;
    o.regrow_plans = regrow;
    return Session(load_onnx(path), default_op_registry(), o);
  };
  Session patched = open_session(true), fresh = open_session(false);
  const std::vector<float> z{0.25f, -1.f, 3.5f, 8.f};
  auto inputs = [&](int64_t len) {
    std::vector<float> x(static_cast<size_t>(len));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i) - 1.f;
    return std::vector<NamedTensor>{{"x", test::make_tensor<float>({1, len}, x)},
                                    {"z", test::make_tensor<float>({1, 4}, z)},
                                    {"w", test::make_tensor<float>({1}, {-2.5f})}};
  };
  patched.reserve(inputs(12));
  fresh.reserve(inputs(12));
  const std::vector<int64_t> lengths{4, 5, 6, 7, 8, 9, 10, 11, 12, 7};
  for (int64_t len : lengths) {
    INFO("L = " << len);
    const std::vector<Tensor> got = patched.run(inputs(len)), want = fresh.run(inputs(len));
    REQUIRE(got.size() == 3);
    for (size_t o = 0; o < got.size(); ++o) require_same(got[o], want[o], true);
    for (size_t i = 0; i < z.size(); ++i) CHECK(got[0].data<float>()[i] == z[i] + static_cast<float>(len));
    CHECK(got[1].shape() == Shape{len, 1});
    CHECK(got[2].shape() == Shape{len / 4});
  }
  CHECK(fresh.stats().plans_patched == 0);
  CHECK(patched.stats().plans_patched == static_cast<int64_t>(lengths.size()));
  return patched.stats();
}

}  // namespace

TEST_CASE("plan patching: a value whose data alone changed reaches only the nodes that fold or read it", "[plan]") {
  // Patched plans must give what plans built afresh give, and reshape
  // exactly the nodes that need it. Each patch: Shape, Gather, Unsqueeze,
  // Cast, Concat, Div and Reshape (x's shape and the new [L, 1]), and Expand
  // where L / 4 changed (4, 8, 12 and back to 7): 7 × 10 + 4. The Add is
  // never reshaped.
  const Session::Stats st = data_only_steps(false);
  CHECK(st.nodes_patched == 74);
  CHECK(st.plans_regrown == 0);
}

TEST_CASE("plan growth: a view and a node whose shape reads values are reshaped again and checked", "[plan]") {
  // The same steps growing as the step before: the Reshape (a view, its
  // shape read off a fold) is reshaped again at each repeat and found to
  // grow as recorded. 4 and 5 patch (12 -> 4, then +1 recorded: 8 and 7
  // nodes); 6 and 7 repeat it (the Reshape alone); at 8, L / 4 changes where
  // it did not, so the repeat is put back and 8 is patched (8 nodes,
  // recording that change); 9 does not repeat it (7 nodes); 10 and 11
  // repeat; 12 and back to 7 patch (8 each): 8 + 7 + 1 + 1 + 8 + 7 + 1 + 1 +
  // 8 + 8.
  const Session::Stats st = data_only_steps(true);
  CHECK(st.plans_regrown == 4);
  CHECK(st.nodes_patched == 50);
}

TEST_CASE("plan growth: a node reshaped again whose shape does not grow as recorded puts the plan back", "[plan]") {
  // Expand(w, [L·L]) grows by 2L + 1 each step: a repeat of the step before
  // would give it the last step's growth. Its reshape says otherwise, so
  // every repeat is put back and patched; the outputs are those of plans
  // built afresh. The Reshape beside it (a view growing by one) alone
  // repeats fine.
  for (bool square : {true, false}) {
    INFO((square ? "Expand to L*L" : "Expand to L"));
    ModelBuilder b;
    b.input("x", kFloat, {1, -1}).input("w", kFloat, {1});
    b.output("y1", kFloat, {-1}).output("y2", kFloat, {-1, 1});
    b.initializer<int64_t>("i1", kInt64, {}, {1});
    b.initializer<int64_t>("i0", kInt64, {1}, {0});
    b.initializer<int64_t>("one", kInt64, {1}, {1});
    b.node("Shape", {"x"}, {"s"});
    b.node("Gather", {"s", "i1"}, {"len"});
    b.node("Unsqueeze", {"len", "i0"}, {"len1"});
    if (square) b.node("Mul", {"len1", "len1"}, {"n"});
    else b.node("Identity", {"len1"}, {"n"});
    b.node("Expand", {"w", "n"}, {"y1"});
    ModelBuilder::attr_int(b.node("Concat", {"len1", "one"}, {"shp"}), "axis", 0);
    b.node("Reshape", {"x", "shp"}, {"y2"});
    const std::string path = scratch_dir(square ? "plan_regrow_square" : "plan_regrow_linear") + "/model.onnx";
    b.save(path);
    auto open_session = [&](bool patch) {
      SessionOptions o;
      o.patch_plans = patch;
      return Session(load_onnx(path), default_op_registry(), o);
    };
    Session grown = open_session(true), fresh = open_session(false);
    auto inputs = [&](int64_t len) {
      std::vector<float> x(static_cast<size_t>(len));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 3.f;
      return std::vector<NamedTensor>{{"x", test::make_tensor<float>({1, len}, x)},
                                      {"w", test::make_tensor<float>({1}, {1.5f})}};
    };
    grown.reserve(inputs(20));
    fresh.reserve(inputs(20));
    for (int64_t len = 3; len <= 20; ++len) {
      INFO("L = " << len);
      const std::vector<Tensor> got = grown.run(inputs(len)), want = fresh.run(inputs(len));
      REQUIRE(got.size() == 2);
      require_same(got[0], want[0], true);
      require_same(got[1], want[1], true);
      CHECK(got[0].shape() == Shape{square ? len * len : len});
    }
    // 3 patches from 20, 4 records +1, 5..20 repeat it when they can.
    CHECK(grown.stats().plans_patched == 18);
    CHECK(grown.stats().plans_regrown == (square ? 0 : 16));
  }
}

namespace {

// x's length L reaches only folds: y1 = Range(0, L), a steady step's growth
// (one more each step); with `halves`, y2 = Range(0, L / 2) too, which grows
// every other step; with `quarters`, q = L / 4 read by y3 = Range(0, q)
// (reached only when q changes) and by y4 = z + q, a static Add whose
// reshape reads shapes only (it runs on the new q).
std::string fold_model(bool halves, bool quarters, const std::string& name) {
  ModelBuilder b;
  b.input("x", kFloat, {1, -1}).input("z", kFloat, {2}).output("y1", kInt64, {-1});
  b.initializer<int64_t>("i1", kInt64, {}, {1});
  b.initializer<int64_t>("zero", kInt64, {}, {0});
  b.initializer<int64_t>("two", kInt64, {}, {2});
  b.initializer<int64_t>("four", kInt64, {}, {4});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "i1"}, {"len"});
  b.node("Range", {"zero", "len", "i1"}, {"y1"});
  if (halves) {
    b.output("y2", kInt64, {-1});
    b.node("Div", {"len", "two"}, {"half"});
    b.node("Range", {"zero", "half", "i1"}, {"y2"});
  }
  if (quarters) {
    b.output("y3", kInt64, {-1}).output("y4", kFloat, {2});
    b.node("Div", {"len", "four"}, {"q"});
    b.node("Range", {"zero", "q", "i1"}, {"y3"});
    ModelBuilder::attr_int(b.node("Cast", {"q"}, {"qf"}), "to", kFloat);
    b.node("Add", {"z", "qf"}, {"y4"});
  }
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  return path;
}

// Lengths 12, 11, ..., 4 after a reserve for 40, then 5, 6, ..., 39: each
// session's outputs must be those of plans built afresh, at every length.
// Returns the plans regrown.
int64_t fold_steps(const std::string& path, bool regrow) {
  auto open_session = [&](bool patch, bool grow) {
    SessionOptions o;
    o.patch_plans = patch;
    o.regrow_plans = grow;
    return Session(load_onnx(path), default_op_registry(), o);
  };
  Session s = open_session(true, regrow), fresh = open_session(false, false);
  auto inputs = [](int64_t len) {
    return std::vector<NamedTensor>{{"x", Tensor(DType::F32, {1, len}, nullptr)},
                                    {"z", test::make_tensor<float>({2}, {0.5f, -3.f})}};
  };
  s.reserve(inputs(40));
  std::vector<int64_t> lengths;
  for (int64_t len = 12; len >= 4; --len) lengths.push_back(len);
  for (int64_t len = 5; len < 40; ++len) lengths.push_back(len);
  for (int64_t len : lengths) {
    INFO("L = " << len);
    const std::vector<Tensor> got = s.run(inputs(len)), want = fresh.run(inputs(len));
    REQUIRE(got.size() == want.size());
    for (size_t o = 0; o < got.size(); ++o) require_same(got[o], want[o], true);
    CHECK(got[0].shape() == Shape{len});
  }
  CHECK(s.stats().plans_patched == static_cast<int64_t>(lengths.size()));
  return s.stats().plans_regrown;
}

}  // namespace

TEST_CASE("plan growth: a step that grows as the one before repeats that patch, reshaping nothing", "[plan]") {
  // Each length after the first patch of a run in one direction repeats the
  // patch before: 12 -> 11 records -1 (after 40 -> 12 recorded -28), 10..4
  // repeat it; 4 -> 5 records +1, 6..39 repeat it.
  const std::string path = fold_model(false, false, "plan_growth_linear");
  CHECK(fold_steps(path, true) == 7 + 34);
  CHECK(fold_steps(path, false) == 0);
}

TEST_CASE("plan growth: folds that grow otherwise put the plan back and patch it node by node", "[plan]") {
  // y2 = Range(0, L / 2) grows by 0 and 1 in turn: no step repeats the one
  // before, and each try is undone after y1 already grew.
  CHECK(fold_steps(fold_model(true, false, "plan_growth_halves"), true) == 0);
  // q = L / 4 changes at every fourth length: a step where it changes where
  // it did not before (Range(0, q) would need evaluating) is patched node by
  // node; the steps between repeat.
  const int64_t regrown = fold_steps(fold_model(false, true, "plan_growth_quarters"), true);
  CHECK(regrown > 0);
  CHECK(regrown < 7 + 34);
}

TEST_CASE("plan growth: a decode loop over the KV state reshapes nothing after its second step", "[kv_state][plan]") {
  // The scores' ·scale, + mask and Softmax fused into Q·Kᵀ: the nodes the
  // past length reaches are the KV appends and the attention products
  // (Kernel::follows_growth) and folds. Growing, patching node by node, and
  // planning afresh give the same bits at every step.
  for (Cache cache : {Cache::Stacked, Cache::PerLayer}) {
    INFO((cache == Cache::Stacked ? "stacked" : "per-layer") << " cache");
    const std::string path = scratch_dir("kv_growth") + "/model.onnx";
    attention(cache, Extra::Mask).save(path);
    auto open_session = [&](bool patch, bool grow) {
      SessionOptions o;
      o.kv_state_inputs = past_names(cache);
      o.patch_plans = patch;
      o.regrow_plans = grow;
      return Session(load_onnx(path), default_op_registry(), o);
    };
    Session grown = open_session(true, true), patched = open_session(true, false), fresh = open_session(false, false);
    REQUIRE(grown.pass_report().get("kv_state") == 2);
    REQUIRE(grown.pass_report().get("scores_softmax_fused") == 1);
    auto inputs = [&](int64_t p, int64_t n, int seed) {
      std::vector<NamedTensor> in{{"x", input_x(n, seed)}};
      for (const std::string& name : past_names(cache))
        in.push_back({name, Tensor(DType::F32, past_shape(cache, p), nullptr)});
      Tensor mask = Tensor::allocate(DType::F32, {1, 1, n, p + n});
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < p + n; ++j) mask.data<float>()[i * (p + n) + j] = j <= p + i ? 0.f : -3.4e38f;
      in.push_back({"mask", mask});
      return in;
    };
    for (Session* s : {&grown, &patched, &fresh}) {
      s->reserve(inputs(0, 5, 0));
      s->reserve(inputs(40, 1, 0));
    }
    std::vector<std::pair<int64_t, int64_t>> steps{{0, 5}};
    for (int64_t p = 5; p < 39; ++p) steps.push_back({p, 1});
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto [p, n] = steps[i];
      INFO("step " << i << ": past " << p << ", " << n << " new");
      const std::vector<Tensor> a = grown.run(inputs(p, n, static_cast<int>(i)));
      require_same(a[0], patched.run(inputs(p, n, static_cast<int>(i)))[0], true);
      require_same(a[0], fresh.run(inputs(p, n, static_cast<int>(i)))[0], true);
    }
    // The prefill is the reserved plan itself; the first one-token step
    // patches the plan reserved for past 40 down to 6 positions, the second
    // records +1, and the other 32 repeat it.
    CHECK(grown.stats().plans_patched == 34);
    CHECK(grown.stats().plans_regrown == 32);
    CHECK(patched.stats().plans_regrown == 0);
    CHECK(grown.stats().nodes_patched * 10 < patched.stats().nodes_patched);
  }
}

TEST_CASE("plan growth: KvAppend and GqaMatMul check at run what their reshape checks", "[kv_state][plan]") {
  // A grown plan binds them without reshaping (Kernel::follows_growth): run
  // must refuse tensors their reshape would have refused, by name.
  Graph g;
  for (const char* name : {"a", "kv", "y", "x", "past", "state", "stride", "e"}) g.add_value(Value{name});
  Node gqa{"gqa", "GqaMatMul", kOneBitDomain, 1, {0, 1}, {2}, {}};
  Attribute trans_b;
  trans_b.kind = Attribute::Kind::Int;
  trans_b.i = 1;
  gqa.attrs.set("transB", trans_b);
  Node append{"append", "KvAppend", kOneBitDomain, 1, {3, 4}, {5, 6}, {}};
  Attribute axis;
  axis.kind = Attribute::Kind::Int;
  axis.i = 2;
  append.attrs.set("past_axis", axis);
  Node half_repeat = gqa;  // Expand's shape without Reshape's
  half_repeat.inputs.push_back(7);
  g.nodes = {gqa, append, half_repeat};
  ThreadPool pool(1);
  const KernelOptions options;
  auto make = [&](int n) {
    const Node& node = g.nodes[static_cast<size_t>(n)];
    return default_op_registry().find(kOneBitDomain, node.op_type, 1)->create(KernelInfo(g, node, &pool, options));
  };
  auto run = [&](Kernel& k, std::vector<const Tensor*> in, std::vector<Tensor>& out) {
    RunContext ctx(in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), nullptr, 0, pool);
    k.run(ctx);
  };
  const std::unique_ptr<Kernel> scores = make(0);
  REQUIRE(scores->follows_growth());
  const Tensor a = Tensor::allocate(DType::F32, {1, 2, 1, 4}), kv = Tensor::allocate(DType::F32, {1, 2, 3, 4});
  std::fill(a.data<float>(), a.data<float>() + a.size(), 0.5f);
  std::fill(kv.data<float>(), kv.data<float>() + kv.size(), 0.25f);
  std::vector<Tensor> y{Tensor::allocate(DType::F32, {1, 2, 1, 3})};
  REQUIRE_NOTHROW(run(*scores, {&a, &kv}, y));
  CHECK(y[0].data<float>()[0] == 0.5f);
  std::vector<Tensor> wrong{Tensor::allocate(DType::F32, {1, 2, 1, 4})};  // the keys grew, the scores did not
  CHECK_THROWS_WITH(run(*scores, {&a, &kv}, wrong),
                    Catch::Contains("bound to an output of float32 [1,2,1,4], expected float32 [1,2,1,3]"));
  const Tensor a3 = Tensor::allocate(DType::F32, {1, 3, 1, 4});  // 3 query heads over 2 KV heads
  CHECK_THROWS_WITH(run(*scores, {&a3, &kv}, y), Catch::Contains("does not match the repeated KV"));
  const Tensor e = test::make_tensor<int64_t>({5}, {1, 2, 1, 3, 4});
  CHECK_THROWS_WITH(run(*make(2), {&a, &kv, &e}, y), Catch::Contains("has only input 2 of the repeat's two shapes"));

  const std::unique_ptr<Kernel> kv_append = make(1);
  REQUIRE(kv_append->follows_growth());
  const Tensor x = Tensor::allocate(DType::F32, {1, 2, 1, 4}), past = Tensor(DType::F32, {1, 2, 0, 4}, nullptr);
  std::fill(x.data<float>(), x.data<float>() + x.size(), 1.f);
  std::vector<Tensor> state(2);
  state[1] = Tensor::allocate(DType::I64, {});
  REQUIRE_NOTHROW(run(*kv_append, {&x, &past}, state));
  CHECK(state[0].shape() == Shape{1, 2, 1, 4});
  const Tensor x3 = Tensor::allocate(DType::F32, {2, 1, 4});
  CHECK_THROWS_WITH(run(*kv_append, {&x3, &past}, state), Catch::Contains("expected [1, kv_heads, S, head_dim]"));
  const Tensor flat_past = Tensor(DType::F32, {1, 2}, nullptr);
  CHECK_THROWS_WITH(run(*kv_append, {&x, &flat_past}, state),
                    Catch::Contains("past_axis 2 is outside the past's shape [1,2]"));
}

TEST_CASE("plan growth: GroupQueryAttention over the KV state and ReduceSum check at run what reshape checks",
          "[kv_state][plan][genai]") {
  // onnxruntime-genai's decode steps reach these two (the attention and the
  // mask's ReduceSum into seqlens_k): a grown plan binds them unreshaped.
  Graph g;
  for (const char* name : {"q", "k", "v", "past_k", "past_v", "seqlens", "total", "y", "mask", "axes", "sum"})
    g.add_value(Value{name});
  auto int_attr = [](int64_t v) {
    Attribute a;
    a.kind = Attribute::Kind::Int;
    a.i = v;
    return a;
  };
  Node gqa{"gqa", "GroupQueryAttention", kOneBitDomain, 1, {0, 1, 2, 3, 4, 5, 6}, {7}, {}};
  gqa.attrs.set("num_heads", int_attr(2));
  gqa.attrs.set("kv_num_heads", int_attr(1));
  Node sum{"sum", "ReduceSum", "", 13, {8, 9}, {10}, {}};
  sum.attrs.set("keepdims", int_attr(0));
  Node sum_of_axes = sum;  // axes a value the file computes: they could change a step's output dims
  sum_of_axes.inputs[1] = 11;
  g.add_value(Value{"computed_axes"});
  g.value(9).constant = test::make_tensor<int64_t>({1}, {1});
  g.nodes = {gqa, sum, sum_of_axes};
  ThreadPool pool(1);
  const KernelOptions options;
  auto make = [&](int n, const std::string& domain, int64_t opset) {
    const Node& node = g.nodes[static_cast<size_t>(n)];
    return default_op_registry().find(domain, node.op_type, opset)->create(KernelInfo(g, node, &pool, options));
  };
  auto run = [&](Kernel& k, std::vector<const Tensor*> in, std::vector<Tensor>& out, void* ws, size_t ws_bytes) {
    RunContext ctx(in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), ws, ws_bytes,
                   pool);
    k.run(ctx);
  };
  auto filled = [](DType t, Shape shape, float v) {
    Tensor x = Tensor::allocate(t, std::move(shape));
    std::fill(x.data<float>(), x.data<float>() + x.size(), v);
    return x;
  };
  const std::unique_ptr<Kernel> attention = make(0, kOneBitDomain, 1);
  REQUIRE(attention->follows_growth());
  const Tensor q = filled(DType::F32, {1, 1, 8}, 0.5f), k = filled(DType::F32, {1, 1, 4}, 0.25f),
               v = filled(DType::F32, {1, 1, 4}, 2.f);
  const Tensor past(DType::F32, {1, 1, 0, 4}, nullptr);
  const Tensor seqlens = test::make_tensor<int32_t>({1}, {0}), total = test::make_tensor<int32_t>({}, {1});
  const std::vector<const Tensor*> in{&q, &k, &v, &past, &past, &seqlens, &total};
  // The workspace the reshape asks for, as a plan would reserve it.
  std::vector<InputInfo> infos(in.size());
  for (size_t i = 0; i < in.size(); ++i) infos[i] = {in[i]->dtype(), &in[i]->shape(), in[i], true};
  ReshapeContext rc(infos, 1, {true});
  attention->reshape(rc);
  REQUIRE(rc.outputs()[0].shape == Shape{1, 1, 8});
  REQUIRE(rc.workspace() > 0);
  std::vector<float> ws(rc.workspace() / sizeof(float) + 16);
  std::vector<Tensor> y{Tensor::allocate(DType::F32, {1, 1, 8})};
  REQUIRE_NOTHROW(run(*attention, in, y, ws.data(), rc.workspace()));
  CHECK(y[0].data<float>()[0] == 2.f);  // one position: its value
  std::vector<Tensor> wrong{Tensor::allocate(DType::F32, {1, 2, 8})};
  CHECK_THROWS_WITH(run(*attention, in, wrong, ws.data(), rc.workspace()),
                    Catch::Contains("output 0 is bound as float32 [1,2,8], expected float32 [1,1,8]"));
  CHECK_THROWS_WITH(run(*attention, in, y, ws.data(), rc.workspace() / 2), Catch::Contains("-byte workspace"));
  const Tensor total0 = test::make_tensor<int32_t>({}, {0});
  std::vector<const Tensor*> short_total = in;
  short_total[6] = &total0;
  CHECK_THROWS_WITH(run(*attention, short_total, y, ws.data(), rc.workspace()),
                    Catch::Contains("total_sequence_length 0 is less than the sequence length 1"));

  const std::unique_ptr<Kernel> reduce = make(1, "", 13);
  REQUIRE(reduce->follows_growth());
  CHECK_FALSE(make(2, "", 13)->follows_growth());
  const Tensor mask = test::make_tensor<int64_t>({1, 5}, {1, 1, 1, 1, 1});
  const Tensor axes = test::make_tensor<int64_t>({1}, {1});
  std::vector<Tensor> s{Tensor::allocate(DType::I64, {1})};
  REQUIRE_NOTHROW(run(*reduce, {&mask, &axes}, s, nullptr, 0));
  CHECK(s[0].data<int64_t>()[0] == 5);
  std::vector<Tensor> s5{Tensor::allocate(DType::I64, {5})};
  CHECK_THROWS_WITH(run(*reduce, {&mask, &axes}, s5, nullptr, 0),
                    Catch::Contains("bound to an output of int64 [5] for input int64 [1,5]"));
}

TEST_CASE("plan patching: a patch that fails leaves no half-patched plan behind", "[plan]") {
  // Reshape(Relu(x), [2, -1]) refuses an odd length. The plan reserved for
  // 12 is patched to 10, then a patch to 9 fails at the Reshape after the
  // Relu was moved: the next run of 10 must not find that plan kept under
  // its old shapes.
  ModelBuilder b;
  b.input("x", kFloat, {1, -1}).output("y", kFloat, {2, -1}).output("s", kFloat, {1, -1});
  b.initializer<int64_t>("two_rows", kInt64, {2}, {2, -1});
  b.node("Relu", {"x"}, {"r"});
  b.node("Reshape", {"r", "two_rows"}, {"y"});
  b.node("Add", {"x", "x"}, {"s"});
  const std::string path = scratch_dir("plan_patch_fails") + "/model.onnx";
  b.save(path);
  Session s(load_onnx(path), default_op_registry());
  auto x = [](int64_t len) {
    std::vector<float> v(static_cast<size_t>(len));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 4.5f;
    return std::vector<NamedTensor>{{"x", test::make_tensor<float>({1, len}, v)}};
  };
  s.reserve(x(12));
  const std::vector<Tensor> first = s.run(x(10));
  CHECK(s.stats().plans_patched == 1);
  CHECK_THROWS_WITH(s.run(x(9)), Catch::Contains("Reshape"));
  std::vector<Tensor> again;
  REQUIRE_NOTHROW(again = s.run(x(10)));
  REQUIRE(again.size() == 2);
  require_same(again[0], first[0], true);
  require_same(again[1], first[1], true);
}

// The kv-state pass gives GqaMatMul (input 4) and GroupedAttention (inputs 10
// and 11) the cache's head stride, which run() reads as one int64: any other
// tensor there is refused when planned, by input number.
TEST_CASE("kv state: a head-stride input that is not one int64 is refused", "[kv_state]") {
  using test::make_tensor;
  using test::OpTest;
  const Tensor a = make_tensor<float>({1, 1, 1, 2}, {1, 2});
  const Tensor kv = make_tensor<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  auto gqa = [&](Tensor stride) {
    return OpTest("GqaMatMul", 1, "com.onebit").attr("transB", 1).input(a).input(kv).omit().omit().input(stride).run1();
  };
  const Tensor y = gqa(make_tensor<int64_t>({1}, {4}));
  CHECK(y.data<float>()[0] == 5.0f);
  CHECK(y.data<float>()[1] == 11.0f);
  CHECK_THROWS_WITH(gqa(make_tensor<float>({1}, {4})), Catch::Contains("input 4 (the KV heads' stride) is float32 [1]"));
  CHECK_THROWS_WITH(gqa(make_tensor<int64_t>({2}, {4, 4})), Catch::Contains("input 4 (the KV heads' stride) is int64 [2]"));

  // Two query heads over one KV head: the repeat's shapes as the pass writes them.
  const Tensor q = make_tensor<float>({1, 1, 4}, {1, 0, 0, 1});
  auto grouped = [&](Tensor ks, Tensor vs) {
    OpTest t("GroupedAttention", 1, "com.onebit");
    t.attr("num_heads", int64_t{2}).input(q).input(kv).input(kv).omit();
    for (int i = 0; i < 2; ++i)
      t.constant(make_tensor<int64_t>({5}, {1, 1, 2, 2, 2}))
          .constant(make_tensor<int64_t>({4}, {1, 2, 2, 2}))
          .constant(make_tensor<int64_t>({3}, {1, 2, 4}));
    return t.input(ks).input(vs).run1();
  };
  const Tensor o = grouped(make_tensor<int64_t>({1}, {4}), make_tensor<int64_t>({}, {4}));
  CHECK(o.shape() == Shape{1, 1, 4});
  CHECK_THROWS_WITH(grouped(make_tensor<int32_t>({1}, {4}), make_tensor<int64_t>({1}, {4})),
                    Catch::Contains("input 10 (the KV heads' stride) is int32 [1]"));
  CHECK_THROWS_WITH(grouped(make_tensor<int64_t>({1}, {4}), make_tensor<int64_t>({1, 0}, {})),
                    Catch::Contains("input 11 (the KV heads' stride) is int64 [1,0]"));
}

namespace {

// The causal mask over p past and n new positions (transformers' float
// form: 0 kept, the float minimum hidden; float16's lowest, -65504, for a
// float16 export).
Tensor causal(int64_t p, int64_t n, bool half = false) {
  Tensor mask = Tensor::allocate(half ? DType::F16 : DType::F32, {1, 1, n, p + n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < p + n; ++j) {
      const bool kept = j <= p + i;
      if (half) mask.data<uint16_t>()[i * (p + n) + j] = float_to_half(kept ? 0.f : -65504.f);
      else mask.data<float>()[i * (p + n) + j] = kept ? 0.f : -3.4e38f;
    }
  return mask;
}

// any_mask: the mask input's shape undeclared (as torch.onnx's TorchScript
// exporter leaves it): the scores' chain is fused with mask_any_shape.
// dtype kHalf: a float16 export's attention.
Session open_mix(Cache cache, const std::string& name, bool fuse, DType kv_dtype, int threads, bool p_out = false,
                 bool any_mask = false, int32_t dtype = kFloat) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  ModelBuilder b = attention(cache, Extra::Mask, kRep, dtype);
  if (p_out) b.output("p", dtype, {1, kKvHeads * kRep, -1, -1});
  for (auto& in : *b.graph().mutable_input())
    if (any_mask && in.name() == "mask") in.mutable_type()->mutable_tensor_type()->clear_shape();
  b.save(path);
  SessionOptions o;
  o.kv_state_inputs = past_names(cache);
  o.kernel.kv_dtype = kv_dtype;
  o.threads = threads;
  if (!fuse) o.stop_after_pass = test::pass_index("fuse-scores-mix");
  return Session(load_onnx(path), default_op_registry(), o);
}

}  // namespace

TEST_CASE("scores mix: the scores' chain and their P.V in one node, bit-identical with and without the pass",
          "[kv_state][scores_mix]") {
  // Prompts of several blocks of 32 rows (the causal half left out block by
  // block), single steps and a chunk on a past: every output bit the same
  // as the two nodes', for each cache dtype and one or two threads; for a
  // float16 export too (each block's P rounded to float16, the output once).
  for (const int32_t dtype : {kFloat, kHalf})
    for (Cache cache : {Cache::Stacked, Cache::PerLayer})
      for (DType kv : {DType::Undefined, DType::F32, DType::F16, DType::I8})
        for (int threads : {1, 2}) {
          if (kv == DType::F32 && dtype == kFloat) continue;  // the float32 export's own (Undefined)
          const bool half = dtype == kHalf;
          INFO((half ? "float16" : "float32") << " export, " << (cache == Cache::Stacked ? "stacked" : "per-layer")
                                              << " cache, kv " << dtype_name(kv) << ", threads " << threads);
          Session fused = open_mix(cache, "scores_mix_fused", true, kv, threads, false, false, dtype);
          Session pair = open_mix(cache, "scores_mix_pair", false, kv, threads, false, false, dtype);
          REQUIRE(fused.pass_report().get("scores_mix_fused") == 1);
          REQUIRE(pair.pass_report().get("scores_mix_fused") == 0);
          REQUIRE(pair.pass_report().get("scores_softmax_fused") == 1);
          int64_t p = 0;
          int seed = 0;
          for (const int64_t n : {70, 1, 1, 37, 1, 33}) {
            INFO("past " << p << ", " << n << " new");
            std::vector<NamedTensor> in{{"x", input_x(n, seed++, false, half)}};
            for (const std::string& name : past_names(cache))
              in.push_back({name, Tensor(half ? DType::F16 : DType::F32, past_shape(cache, p), nullptr)});
            in.push_back({"mask", causal(p, n, half)});
            const Tensor y = fused.run(in)[0];
            REQUIRE(y.dtype() == (half ? DType::F16 : DType::F32));
            require_same(y, pair.run(in)[0], true);
            p += n;
          }
        }
}

TEST_CASE("scores mix on a mask of undeclared shape: rows or not, bit-identical with and without the pass",
          "[kv_state][scores_mix]") {
  // The mask as rows over the scores (the causal one) takes the blocks; one
  // broadcast along the keys ([1, 1, S, 1]) is not rows: P whole, then P.V.
  // A float16 export's too (an Optimum export converted to float16).
  for (const int32_t dtype : {kFloat, kHalf})
    for (int threads : {1, 2}) {
      const bool half = dtype == kHalf;
      const DType elem = half ? DType::F16 : DType::F32;
      INFO((half ? "float16" : "float32") << ", threads " << threads);
      Session fused = open_mix(Cache::PerLayer, "scores_mix_any", true, DType::Undefined, threads, false, true, dtype);
      Session pair =
          open_mix(Cache::PerLayer, "scores_mix_any_pair", false, DType::Undefined, threads, false, true, dtype);
      REQUIRE(fused.pass_report().get("scores_mix_fused") == 1);
      REQUIRE(pair.pass_report().get("scores_softmax_fused") == 1);
      int64_t p = 0;
      int seed = 0;
      for (const int64_t n : {40, 1, 9, 1}) {
        for (bool rows : {true, false}) {
          INFO("past " << p << ", " << n << " new, mask " << (rows ? "causal" : "[1,1,S,1]"));
          Tensor mask = rows ? causal(p, n, half) : Tensor::allocate(elem, {1, 1, n, 1});
          if (!rows)
            for (int64_t i = 0; i < n; ++i) {
              const float v = static_cast<float>(i % 3) - 1.f;
              if (half) mask.data<uint16_t>()[i] = float_to_half(v);
              else mask.data<float>()[i] = v;
            }
          auto in = [&](int64_t past) {
            std::vector<NamedTensor> v{{"x", input_x(n, seed, false, half)},
                                       {"past_k", Tensor(elem, past_shape(Cache::PerLayer, past), nullptr)},
                                       {"past_v", Tensor(elem, past_shape(Cache::PerLayer, past), nullptr)},
                                       {"mask", mask}};
            return v;
          };
          // The causal run appends; the other reads the same past again
          // (a shorter past takes the later positions back).
          require_same(fused.run(in(p))[0], pair.run(in(p))[0], true);
        }
        p += n;
        ++seed;
      }
    }
}

TEST_CASE("scores mix must not fire when P is read elsewhere", "[kv_state][scores_mix][must-not-fire]") {
  Session s = open_mix(Cache::PerLayer, "scores_mix_p_out", true, DType::Undefined, 1, true);
  CHECK(s.pass_report().get("scores_mix_fused") == 0);
  CHECK(s.pass_report().get("scores_mix_refused:p_read_elsewhere") == 1);
}

TEST_CASE("GqaMatMul with values: P.V of a block past a value that is not finite, as the two nodes give it",
          "[kv_state][scores_mix]") {
  // The fused node (inputs 6 and 7) against the scores node then the P.V
  // node on the same tensors: keys and values laid out as a state of 40
  // positions holding 37, a value row past the causal half holding inf (0·inf
  // is NaN, so rows that left it out must still meet it) and one holding
  // NaN in another case; float32 and float16 states.
  constexpr int64_t kvh = 2, rep = 3, d = 8, t = 37, cap = 40, s = 37;
  for (DType kv : {DType::F32, DType::F16})
    for (int bad : {-1, 30, 36}) {
      INFO("kv " << dtype_name(kv) << ", non-finite value row " << bad);
      Graph g;
      for (const char* name : {"q", "k", "ks", "mask", "p", "v", "vs", "y"}) g.add_value(Value{name});
      auto attr = [](Node& n, const char* name, int64_t i) {
        Attribute a;
        a.kind = Attribute::Kind::Int;
        a.i = i;
        n.attrs.set(name, a);
      };
      Node scores{"scores", "GqaMatMul", kOneBitDomain, 1, {0, 1, -1, -1, 2, 3}, {4}, {}};
      attr(scores, "transB", 1);
      attr(scores, "softmax", 1);
      attr(scores, "kv_repeat", rep);
      Attribute scale;
      scale.kind = Attribute::Kind::Float;
      scale.f = 0.35f;
      scores.attrs.set("score_scale", scale);
      Node mix{"mix", "GqaMatMul", kOneBitDomain, 1, {4, 5, -1, -1, 6}, {7}, {}};
      attr(mix, "kv_repeat", rep);
      Node fused = scores;
      fused.inputs = {0, 1, -1, -1, 2, 3, 5, 6};
      fused.outputs = {7};
      g.nodes = {scores, mix, fused};
      ThreadPool pool(1);
      const KernelOptions options;
      auto run = [&](int n, std::vector<const Tensor*> in, Tensor& out, size_t ws_bytes) {
        const Node& node = g.nodes[static_cast<size_t>(n)];
        auto k = default_op_registry().find(kOneBitDomain, "GqaMatMul", 1)->create(KernelInfo(g, node, &pool, options));
        std::vector<unsigned char> ws(ws_bytes + 64);
        void* aligned = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
        std::vector<Tensor> outs{out};
        RunContext ctx(in.data(), static_cast<int>(in.size()), outs.data(), 1, aligned, ws_bytes, pool);
        k->run(ctx);
      };
      Tensor q = Tensor::allocate(DType::F32, {1, kvh * rep, s, d});
      for (int64_t i = 0; i < q.size(); ++i) q.data<float>()[i] = static_cast<float>((i * 7) % 13) / 6.f - 1.f;
      const size_t elem = kv == DType::F16 ? 2 : 4;
      Tensor k = Tensor::allocate(kv, {1, kvh, t, d}), v = Tensor::allocate(kv, {1, kvh, t, d});
      std::vector<unsigned char> kbuf(kvh * cap * d * elem), vbuf(kvh * cap * d * elem);
      for (int64_t h = 0; h < kvh; ++h)
        for (int64_t j = 0; j < t; ++j)
          for (int64_t i = 0; i < d; ++i) {
            const float kf = static_cast<float>((h * 5 + j * 3 + i) % 11) / 8.f - 0.5f;
            float vf = static_cast<float>((h * 3 + j * 5 + i * 7) % 17) / 8.f - 1.f;
            if (j == bad && i == 2) vf = h == 0 ? INFINITY : NAN;
            const size_t at = static_cast<size_t>((h * cap + j) * d + i);
            if (kv == DType::F16) {
              const uint16_t kh = float_to_half(kf), vh = float_to_half(vf);
              std::memcpy(&kbuf[at * 2], &kh, 2);
              std::memcpy(&vbuf[at * 2], &vh, 2);
            } else {
              std::memcpy(&kbuf[at * 4], &kf, 4);
              std::memcpy(&vbuf[at * 4], &vf, 4);
            }
          }
      const Tensor kt(kv, {1, kvh, t, d}, kbuf.data()), vt(kv, {1, kvh, t, d}, vbuf.data());
      const Tensor stride = test::make_tensor<int64_t>({}, {cap * d});
      const Tensor mask = causal(0, s);
      Tensor pm = Tensor::allocate(DType::F32, {1, kvh * rep, s, t});
      Tensor y_pair = Tensor::allocate(DType::F32, {1, kvh * rep, s, d});
      Tensor y_fused = Tensor::allocate(DType::F32, {1, kvh * rep, s, d});
      const size_t ws = size_t{1} << 20;
      run(0, {&q, &kt, nullptr, nullptr, &stride, &mask}, pm, ws);
      run(1, {&pm, &vt, nullptr, nullptr, &stride}, y_pair, ws);
      run(2, {&q, &kt, nullptr, nullptr, &stride, &mask, &vt, &stride}, y_fused, ws);
      REQUIRE(std::memcmp(y_pair.raw(), y_fused.raw(), y_pair.bytes()) == 0);
      int64_t nans = 0;
      for (int64_t i = 0; i < y_pair.size(); ++i) nans += std::isnan(y_pair.data<float>()[i]);
      CHECK((bad < 0 ? nans == 0 : nans > 0));
    }
}
