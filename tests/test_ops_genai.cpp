// onnxruntime's contrib ops of onnxruntime-genai's builds against naive
// references: GroupQueryAttention (packed and separate Q/K/V, rotary half
// and interleaved, partial rotary, past, prompt and decode, window, softcap,
// the KV state the kv-state pass gives it), SimplifiedLayerNormalization,
// SkipSimplifiedLayerNormalization (every optional output),
// GatherBlockQuantized (packed uint8, int4, zero points); and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "tests/random_util.h"
#include "op_test_util.h"

using namespace onebit;
using namespace onebit::test;

using onebit::test::randn;

namespace {

struct GqaCase {
  int64_t b = 1, s = 3, past = 2, heads = 4, kv_heads = 2, d = 8, half = 4;  // half: rotary_dim / 2
  bool packed = true, rotary = true, interleaved = false;
  float softcap = 0;
  int64_t window = -1;
  int64_t max_pos = 16;
  DType dtype = DType::F32;  // of every float input and output (the rotary caches: cache_dtype)
  DType cache_dtype = DType::F32;
  bool bias = false, sink = false;  // attention_bias [b, heads, s, past + s], head_sink [heads]
};

struct GqaData {
  std::vector<float> q, k, v;       // [b, s, heads·d] and [b, s, kv·d] (unpacked views)
  std::vector<float> qkv;           // packed [b, s, (heads + 2 kv)·d]
  std::vector<float> past_k, past_v;  // [b, kv, past, d]
  std::vector<float> cos, sin;      // [max_pos, half]
  std::vector<float> bias, sink;
};

// g.qkv from g.q, g.k and g.v.
void pack_qkv(const GqaCase& c, GqaData& g) {
  const int64_t w = (c.heads + 2 * c.kv_heads) * c.d;
  g.qkv.resize(static_cast<size_t>(c.b * c.s * w));
  for (int64_t r = 0; r < c.b * c.s; ++r) {
    std::copy_n(g.q.begin() + r * c.heads * c.d, c.heads * c.d, g.qkv.begin() + r * w);
    std::copy_n(g.k.begin() + r * c.kv_heads * c.d, c.kv_heads * c.d, g.qkv.begin() + r * w + c.heads * c.d);
    std::copy_n(g.v.begin() + r * c.kv_heads * c.d, c.kv_heads * c.d,
                g.qkv.begin() + r * w + (c.heads + c.kv_heads) * c.d);
  }
}

GqaData make_data(const GqaCase& c, uint32_t seed) {
  GqaData g;
  g.q = randn(static_cast<size_t>(c.b * c.s * c.heads * c.d), seed);
  g.k = randn(static_cast<size_t>(c.b * c.s * c.kv_heads * c.d), seed + 1);
  g.v = randn(static_cast<size_t>(c.b * c.s * c.kv_heads * c.d), seed + 2);
  g.past_k = randn(static_cast<size_t>(c.b * c.kv_heads * c.past * c.d), seed + 3);
  g.past_v = randn(static_cast<size_t>(c.b * c.kv_heads * c.past * c.d), seed + 4);
  pack_qkv(c, g);
  for (int64_t p = 0; p < c.max_pos; ++p)
    for (int64_t i = 0; i < c.half; ++i) {
      const double theta = p / std::pow(10000.0, 2.0 * i / (2.0 * c.half));
      g.cos.push_back(static_cast<float>(std::cos(theta)));
      g.sin.push_back(static_cast<float>(std::sin(theta)));
    }
  g.bias = randn(static_cast<size_t>(c.b * c.heads * c.s * (c.past + c.s)), seed + 5);
  g.sink = randn(static_cast<size_t>(c.heads), seed + 6);
  return g;
}

// Every value of g as float16 holds it (the float32 and float16 nodes then
// read the same numbers).
void round_to_half(GqaData& g) {
  for (std::vector<float>* v : {&g.q, &g.k, &g.v, &g.qkv, &g.past_k, &g.past_v, &g.cos, &g.sin, &g.bias, &g.sink})
    for (float& x : *v) x = half_to_float(float_to_half(x));
}

// The reference: rotate, concatenate the past, causal softmax attention per head.
void reference(const GqaCase& c, const GqaData& g, std::vector<double>& out, std::vector<double>& pk,
               std::vector<double>& pv) {
  const int64_t t = c.past + c.s, rep = c.heads / c.kv_heads, d = c.d;
  auto rot = [&](const float* x, int64_t pos, std::vector<double>& y) {
    y.assign(x, x + d);
    if (!c.rotary) return;
    for (int64_t i = 0; i < c.half; ++i) {
      const double co = g.cos[static_cast<size_t>(pos * c.half + i)], si = g.sin[static_cast<size_t>(pos * c.half + i)];
      const int64_t a = c.interleaved ? 2 * i : i, b = c.interleaved ? 2 * i + 1 : i + c.half;
      y[static_cast<size_t>(a)] = x[a] * co - x[b] * si;
      y[static_cast<size_t>(b)] = x[b] * co + x[a] * si;
    }
  };
  pk.assign(static_cast<size_t>(c.b * c.kv_heads * t * d), 0);
  pv = pk;
  std::vector<double> tmp;
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t gh = 0; gh < c.kv_heads; ++gh) {
      const size_t base = static_cast<size_t>((bi * c.kv_heads + gh) * t * d);
      for (int64_t p = 0; p < c.past; ++p)
        for (int64_t i = 0; i < d; ++i) {
          const size_t src = static_cast<size_t>(((bi * c.kv_heads + gh) * c.past + p) * d + i);
          pk[base + static_cast<size_t>(p * d + i)] = g.past_k[src];
          pv[base + static_cast<size_t>(p * d + i)] = g.past_v[src];
        }
      for (int64_t s = 0; s < c.s; ++s) {
        const int64_t r = bi * c.s + s;
        rot(g.k.data() + (r * c.kv_heads + gh) * d, c.past + s, tmp);
        for (int64_t i = 0; i < d; ++i) {
          pk[base + static_cast<size_t>((c.past + s) * d + i)] = tmp[static_cast<size_t>(i)];
          pv[base + static_cast<size_t>((c.past + s) * d + i)] = g.v[static_cast<size_t>((r * c.kv_heads + gh) * d + i)];
        }
      }
    }
  out.assign(static_cast<size_t>(c.b * c.s * c.heads * d), 0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t s = 0; s < c.s; ++s) {
        const int64_t gh = h / rep, qpos = c.past + s;
        rot(g.q.data() + ((bi * c.s + s) * c.heads + h) * d, qpos, tmp);
        const size_t base = static_cast<size_t>((bi * c.kv_heads + gh) * t * d);
        std::vector<double> w(static_cast<size_t>(t), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j <= qpos; ++j) {
          if (c.window > 0 && j <= qpos - c.window) continue;
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += tmp[static_cast<size_t>(i)] * pk[base + static_cast<size_t>(j * d + i)];
          dot *= scale;
          if (c.softcap > 0) dot = c.softcap * std::tanh(dot / c.softcap);
          w[static_cast<size_t>(j)] = dot;
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (double& x : w) sum += x = std::isinf(x) ? 0.0 : std::exp(x - mx);
        for (int64_t i = 0; i < d; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < t; ++j) acc += w[static_cast<size_t>(j)] / sum * pv[base + static_cast<size_t>(j * d + i)];
          out[static_cast<size_t>(((bi * c.s + s) * c.heads + h) * d + i)] = acc;
        }
      }
}

OpTest gqa_node(const GqaCase& c, const GqaData& g, bool total_constant = false) {
  auto make = [](DType dtype, Shape shape, const std::vector<float>& v) {
    return make_tensor_as(dtype, std::move(shape), std::vector<double>(v.begin(), v.end()));
  };
  auto ten = [&](Shape shape, const std::vector<float>& v) { return make(c.dtype, std::move(shape), v); };
  OpTest t("GroupQueryAttention", 1, "com.microsoft");
  t.attr("num_heads", c.heads).attr("kv_num_heads", c.kv_heads).attr("do_rotary", c.rotary ? 1 : 0);
  t.attr("rotary_interleaved", c.interleaved ? 1 : 0).attr("local_window_size", c.window);
  if (c.softcap > 0) t.attr("softcap", c.softcap);
  const int64_t kvw = c.kv_heads * c.d;
  if (c.packed) {
    t.input(ten({c.b, c.s, (c.heads + 2 * c.kv_heads) * c.d}, g.qkv)).omit().omit();
  } else {
    t.input(ten({c.b, c.s, c.heads * c.d}, g.q));
    t.input(ten({c.b, c.s, kvw}, g.k)).input(ten({c.b, c.s, kvw}, g.v));
  }
  t.input(ten({c.b, c.kv_heads, c.past, c.d}, g.past_k));
  t.input(ten({c.b, c.kv_heads, c.past, c.d}, g.past_v));
  t.input(make_tensor<int32_t>({c.b}, std::vector<int32_t>(static_cast<size_t>(c.b), static_cast<int32_t>(c.past + c.s - 1))));
  Tensor total = make_tensor<int32_t>({}, {static_cast<int32_t>(c.past + c.s)});
  if (total_constant) t.constant(total);
  else t.input(total);
  if (c.rotary) {
    t.constant(make(c.cache_dtype, {c.max_pos, c.half}, g.cos)).constant(make(c.cache_dtype, {c.max_pos, c.half}, g.sin));
  } else if (c.bias || c.sink) {
    t.omit().omit();
  }
  if (c.bias || c.sink) t.omit();  // position_ids
  if (c.bias) t.input(ten({c.b, c.heads, c.s, c.past + c.s}, g.bias));
  else if (c.sink) t.omit();
  if (c.sink) t.constant(ten({c.heads}, g.sink));
  t.outputs(3);
  return t;
}

void check_gqa(const GqaCase& c, bool total_constant = false) {
  const GqaData g = make_data(c, 7);
  std::vector<double> out, pk, pv;
  reference(c, g, out, pk, pv);
  const std::vector<Tensor> y = gqa_node(c, g, total_constant).run();
  REQUIRE(y.size() == 3);
  CHECK(y[0].shape() == Shape{c.b, c.s, c.heads * c.d});
  CHECK(y[1].shape() == Shape{c.b, c.kv_heads, c.past + c.s, c.d});
  CHECK(all_close(to_doubles(y[0]), out, 1e-4, 1e-5));
  CHECK(all_close(to_doubles(y[1]), pk, 1e-5, 1e-6));
  CHECK(all_close(to_doubles(y[2]), pv, 1e-6, 1e-7));
}

}  // namespace

TEST_CASE("GroupQueryAttention: packed QKV with rotary a past a prompt of 3", "[genai][gqa]") {
  GqaCase c;
  check_gqa(c);
  check_gqa(c, /*total_constant=*/true);
}

TEST_CASE("GroupQueryAttention: decode steps first prompt batch 2", "[genai][gqa]") {
  GqaCase c;
  c.s = 1;
  c.past = 9;
  check_gqa(c);  // rep = 2 query heads per KV head, one GEMM each
  c.s = 5;
  c.past = 0;  // the first prompt
  check_gqa(c);
  c.b = 2;
  c.past = 3;
  c.s = 2;
  check_gqa(c);
}

TEST_CASE("GroupQueryAttention: separate Q K V interleaved and partial rotary no rotary", "[genai][gqa]") {
  GqaCase c;
  c.packed = false;
  c.interleaved = true;
  c.half = 2;  // rotary over 4 of the 8 dims
  check_gqa(c);
  c.interleaved = false;
  check_gqa(c);
  c.rotary = false;
  c.heads = c.kv_heads = 3;  // multi-head: one query head per KV head
  check_gqa(c);
}

TEST_CASE("GroupQueryAttention: local window and softcap", "[genai][gqa]") {
  GqaCase c;
  c.past = 6;
  c.s = 4;
  c.window = 3;
  check_gqa(c);
  c.window = -1;
  c.softcap = 2.5f;
  check_gqa(c);
}

// Past 32 query rows the scores go in blocks, each computed only up to the
// keys its rows read: prompts longer than a block, with and without a past,
// a sliding window, two sequences.
TEST_CASE("GroupQueryAttention: a long prompt, its scores computed only where rows read them", "[genai][gqa]") {
  GqaCase c;
  c.max_pos = 128;
  c.s = 80;
  c.past = 7;
  check_gqa(c);
  c.past = 0;
  check_gqa(c);
  c.window = 20;
  check_gqa(c);
  c.window = -1;
  c.b = 2;
  c.s = 40;
  c.past = 3;
  check_gqa(c);
}

TEST_CASE("GroupQueryAttention: errors name the attribute or input", "[genai][gqa]") {
  GqaCase c;
  const GqaData g = make_data(c, 1);
  auto message = [](const OpTest& t) {
    try {
      t.run();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  OpTest bad = gqa_node(c, g);
  bad.attr("num_heads", int64_t{3});
  CHECK(message(bad).find("num_heads = 3") != std::string::npos);
  OpTest qk = gqa_node(c, g);
  qk.attr("qk_output", int64_t{1});
  CHECK(message(qk).find("qk_output") != std::string::npos);
}

// The kv-state pass: the kernel keeps the cache, past is a shape, the
// present outputs are gone, and the steps give what the plain graph gives.
TEST_CASE("GroupQueryAttention: the KV state kept in the session", "[genai][gqa][kv_state]") {
  GqaCase c;
  c.past = 0;
  c.s = 7;
  const GqaData g = make_data(c, 3);
  const Graph graph = gqa_node(c, g).graph();  // in0 qkv, in3/in4 past, in5 seqlens, in6 total
  SessionOptions so;
  so.kv_state_inputs = {"in3", "in4"};
  Session kept(graph, default_op_registry(), so);
  REQUIRE(kept.keeps_kv_state());
  CHECK(kept.output_names().size() == 1);
  Session plain(graph, default_op_registry(), SessionOptions{});
  CHECK(!plain.keeps_kv_state());

  // Prompt of 4, then 3 decode steps, on both.
  const int64_t w = (c.heads + 2 * c.kv_heads) * c.d;
  Tensor pk = Tensor::allocate(DType::F32, {1, c.kv_heads, 0, c.d}), pv = pk;
  for (int64_t pos = 0; pos < 7;) {
    const int64_t n = pos == 0 ? 4 : 1;
    std::vector<float> rows(g.qkv.begin() + pos * w, g.qkv.begin() + (pos + n) * w);
    std::vector<NamedTensor> in = {{"in0", make_tensor<float>({1, n, w}, rows)},
                                   {"in5", make_tensor<int32_t>({1}, {static_cast<int32_t>(pos + n - 1)})},
                                   {"in6", make_tensor<int32_t>({}, {static_cast<int32_t>(pos + n)})}};
    std::vector<NamedTensor> a = in, b = in;
    a.push_back({"in3", pk});
    a.push_back({"in4", pv});
    b.push_back({"in3", Tensor(DType::F32, {1, c.kv_heads, pos, c.d}, nullptr)});
    b.push_back({"in4", Tensor(DType::F32, {1, c.kv_heads, pos, c.d}, nullptr)});
    const std::vector<Tensor> ya = plain.run(a);
    const std::vector<Tensor> yb = kept.run(b);
    CHECK(all_close(to_doubles(yb[0]), to_doubles(ya[0]), 1e-6, 1e-7));
    pk = ya[1];
    pv = ya[2];
    pos += n;
  }
  // A shorter past takes the later positions back (lookup decoding's
  // refused drafts): position 3 again, as the plain graph gives it from the
  // first 3 positions of its cache.
  auto first3 = [&](const Tensor& t) {
    Tensor out = Tensor::allocate(DType::F32, {1, c.kv_heads, 3, c.d});
    for (int64_t h = 0; h < c.kv_heads; ++h)
      std::copy_n(t.data<float>() + h * 7 * c.d, 3 * c.d, out.data<float>() + h * 3 * c.d);
    return out;
  };
  std::vector<float> row3(g.qkv.begin() + 3 * w, g.qkv.begin() + 4 * w);
  std::vector<NamedTensor> again = {{"in0", make_tensor<float>({1, 1, w}, row3)},
                                    {"in5", make_tensor<int32_t>({1}, {3})},
                                    {"in6", make_tensor<int32_t>({}, {4})}};
  std::vector<NamedTensor> a = again, b = again;
  a.push_back({"in3", first3(pk)});
  a.push_back({"in4", first3(pv)});
  b.push_back({"in3", Tensor(DType::F32, {1, c.kv_heads, 3, c.d}, nullptr)});
  b.push_back({"in4", Tensor(DType::F32, {1, c.kv_heads, 3, c.d}, nullptr)});
  CHECK(all_close(to_doubles(kept.run(b)[0]), to_doubles(plain.run(a)[0]), 1e-6, 1e-7));
  // A past longer than the state holds (4 now) is an error, not a silent reset.
  std::vector<NamedTensor> wrong = {{"in0", make_tensor<float>({1, 1, w}, row3)},
                                    {"in5", make_tensor<int32_t>({1}, {6})},
                                    {"in6", make_tensor<int32_t>({}, {7})},
                                    {"in3", Tensor(DType::F32, {1, c.kv_heads, 6, c.d}, nullptr)},
                                    {"in4", Tensor(DType::F32, {1, c.kv_heads, 6, c.d}, nullptr)}};
  CHECK_THROWS_WITH(kept.run(wrong), Catch::Contains("holds 4 positions but the past is 6"));
}

TEST_CASE("GroupQueryAttention: the KV state in float16", "[genai][gqa][kv_state][kv_f16]") {
  // Kept in float16 and in float32, fed the same prompt of 4 and 4 decode
  // steps: bit-identical where float16 holds every key and value (no
  // rotary, inputs rounded to float16), close but rounded with rotary.
  for (bool rotary : {false, true}) {
    INFO((rotary ? "rotary" : "no rotary"));
    GqaCase c;
    c.past = 0;
    c.s = 8;
    c.rotary = rotary;
    GqaData g = make_data(c, 5);
    if (!rotary)
      for (float& x : g.qkv) x = half_to_float(float_to_half(x));
    const Graph graph = gqa_node(c, g).graph();
    SessionOptions so;
    so.kv_state_inputs = {"in3", "in4"};
    Session full(graph, default_op_registry(), so);
    so.kernel.kv_dtype = DType::F16;
    Session half(graph, default_op_registry(), so);
    REQUIRE(half.keeps_kv_state());
    const int64_t w = (c.heads + 2 * c.kv_heads) * c.d;
    double max_diff = 0;
    for (int64_t pos = 0; pos < 8;) {
      const int64_t n = pos == 0 ? 4 : 1;
      std::vector<float> rows(g.qkv.begin() + pos * w, g.qkv.begin() + (pos + n) * w);
      const std::vector<NamedTensor> in = {{"in0", make_tensor<float>({1, n, w}, rows)},
                                           {"in5", make_tensor<int32_t>({1}, {static_cast<int32_t>(pos + n - 1)})},
                                           {"in6", make_tensor<int32_t>({}, {static_cast<int32_t>(pos + n)})},
                                           {"in3", Tensor(DType::F32, {1, c.kv_heads, pos, c.d}, nullptr)},
                                           {"in4", Tensor(DType::F32, {1, c.kv_heads, pos, c.d}, nullptr)}};
      const Tensor a = half.run(in)[0], b = full.run(in)[0];
      REQUIRE(a.shape() == b.shape());
      if (!rotary) REQUIRE(std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
      for (int64_t i = 0; i < a.size(); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
      pos += n;
    }
    if (rotary) {
      CHECK(max_diff > 0);
      CHECK(max_diff < 1e-2);
    }
  }
}

// onnxruntime-genai's builds for GPU execution providers (-e cuda, -e dml)
// are float16 throughout. Against the float32 node on the same values
// (every input one float16 holds): the present K is the float32 node's
// rotated K rounded once to float16 and V is copied; the output is the
// float32 node's within float16 rounding (onnxruntime's CPU kernel rounds
// the rotated Q and K, and the output once).
TEST_CASE("GroupQueryAttention: float16 throughout", "[genai][gqa][f16]") {
  auto max_diff = [](const Tensor& half, const Tensor& full, double& worst_rel) {
    double worst = 0;
    worst_rel = 0;
    for (int64_t i = 0; i < full.size(); ++i) {
      const double a = half_to_float(half.data<uint16_t>()[i]), b = full.data<float>()[i];
      worst = std::max(worst, std::fabs(a - b));
      worst_rel = std::max(worst_rel, std::fabs(a - b) / (1.0 + std::fabs(b)));
    }
    return worst;
  };
  for (int variant = 0; variant < 5; ++variant) {
    INFO("variant " << variant);
    GqaCase c;
    if (variant == 1) {  // separate Q, K, V, a decode step
      c.packed = false;
      c.s = 1;
      c.past = 9;
    }
    if (variant == 2) {  // float32 rotary caches, the first prompt
      c.past = 0;
      c.s = 5;
    }
    if (variant == 3) {  // attention_bias, no rotary
      c.rotary = false;
      c.bias = true;
    }
    if (variant == 4) {  // head_sink, a window
      c.sink = true;
      c.window = 3;
      c.past = 4;
    }
    GqaData g = make_data(c, static_cast<uint32_t>(11 + variant));
    round_to_half(g);
    const std::vector<Tensor> full = gqa_node(c, g).run();
    c.dtype = DType::F16;
    c.cache_dtype = variant == 2 ? DType::F32 : DType::F16;
    const std::vector<Tensor> half = gqa_node(c, g).run();
    REQUIRE(half.size() == 3);
    for (int o = 0; o < 3; ++o) {
      REQUIRE(half[static_cast<size_t>(o)].dtype() == DType::F16);
      REQUIRE(half[static_cast<size_t>(o)].shape() == full[static_cast<size_t>(o)].shape());
    }
    for (int o : {1, 2})
      for (int64_t i = 0; i < full[static_cast<size_t>(o)].size(); ++i) {
        INFO("present " << o << " element " << i);
        REQUIRE(half[static_cast<size_t>(o)].data<uint16_t>()[i] ==
                float_to_half(full[static_cast<size_t>(o)].data<float>()[i]));
      }
    double rel = 0;
    max_diff(half[0], full[0], rel);
    CHECK(rel < 4e-3);
    if (c.rotary && variant < 2) {
      // The rounding points, exactly: the node without rotary, fed Q and K
      // rotated as the kernel rotates them (in float32) and rounded to
      // float16, gives the same bits.
      GqaData pre = g;
      auto rotate16 = [&](float* x, int64_t pos) {
        std::vector<float> y(x, x + c.d);
        for (int64_t i = 0; i < c.half; ++i) {
          const float x1 = x[i], x2 = x[i + c.half];
          const size_t at = static_cast<size_t>(pos * c.half + i);
          const float co = g.cos[at], si = g.sin[at];
          y[static_cast<size_t>(i)] = x1 * co - x2 * si;
          y[static_cast<size_t>(i + c.half)] = x2 * co + x1 * si;
        }
        for (int64_t j = 0; j < c.d; ++j) x[j] = half_to_float(float_to_half(y[static_cast<size_t>(j)]));
      };
      for (int64_t r = 0; r < c.b * c.s; ++r) {
        const int64_t pos = c.past + r % c.s;
        for (int64_t n = 0; n < c.heads; ++n) rotate16(pre.q.data() + (r * c.heads + n) * c.d, pos);
        for (int64_t n = 0; n < c.kv_heads; ++n) rotate16(pre.k.data() + (r * c.kv_heads + n) * c.d, pos);
      }
      pack_qkv(c, pre);
      GqaCase unrotated = c;
      unrotated.rotary = false;
      const std::vector<Tensor> again = gqa_node(unrotated, pre).run();
      for (int o = 0; o < 3; ++o) {
        INFO("output " << o);
        CHECK(std::memcmp(again[static_cast<size_t>(o)].raw(), half[static_cast<size_t>(o)].raw(),
                          half[static_cast<size_t>(o)].bytes()) == 0);
      }
    }
    if (c.bias || c.sink) {  // and it reads them: the output moves without
      GqaCase plain = c;
      plain.bias = plain.sink = false;
      const Tensor without = gqa_node(plain, g).run()[0];
      double moved = 0;
      for (int64_t i = 0; i < without.size(); ++i)
        moved = std::max(moved, std::fabs(double(half_to_float(half[0].data<uint16_t>()[i])) -
                                          half_to_float(without.data<uint16_t>()[i])));
      CHECK(moved > 0.05);
    }
  }
}

TEST_CASE("GroupQueryAttention: a float16 node keeps a float16 state, bit for bit the plain graph's",
          "[genai][gqa][kv_state][f16]") {
  GqaCase c;
  c.past = 0;
  c.s = 7;
  c.dtype = c.cache_dtype = DType::F16;
  GqaData g = make_data(c, 9);
  round_to_half(g);
  const Graph graph = gqa_node(c, g).graph();
  SessionOptions so;
  so.kv_state_inputs = {"in3", "in4"};
  Session kept(graph, default_op_registry(), so);
  REQUIRE(kept.keeps_kv_state());
  Session plain(graph, default_op_registry(), SessionOptions{});
  const int64_t w = (c.heads + 2 * c.kv_heads) * c.d;
  Tensor pk = Tensor::allocate(DType::F16, {1, c.kv_heads, 0, c.d}), pv = pk;
  for (int64_t pos = 0; pos < 7;) {
    const int64_t n = pos == 0 ? 4 : 1;
    const std::vector<float> rows(g.qkv.begin() + pos * w, g.qkv.begin() + (pos + n) * w);
    std::vector<NamedTensor> in = {
        {"in0", make_tensor_as(DType::F16, {1, n, w}, std::vector<double>(rows.begin(), rows.end()))},
        {"in5", make_tensor<int32_t>({1}, {static_cast<int32_t>(pos + n - 1)})},
        {"in6", make_tensor<int32_t>({}, {static_cast<int32_t>(pos + n)})}};
    std::vector<NamedTensor> a = in, b = in;
    a.push_back({"in3", pk});
    a.push_back({"in4", pv});
    b.push_back({"in3", Tensor(DType::F16, {1, c.kv_heads, pos, c.d}, nullptr)});
    b.push_back({"in4", Tensor(DType::F16, {1, c.kv_heads, pos, c.d}, nullptr)});
    const std::vector<Tensor> ya = plain.run(a);
    const std::vector<Tensor> yb = kept.run(b);
    INFO("position " << pos);
    REQUIRE(yb[0].dtype() == DType::F16);
    REQUIRE(yb[0].shape() == ya[0].shape());
    CHECK(std::memcmp(yb[0].raw(), ya[0].raw(), ya[0].bytes()) == 0);
    pk = ya[1];
    pv = ya[2];
    pos += n;
  }
}

TEST_CASE("GroupQueryAttention: the KV state is refused when a past is not named (must not fire)", "[genai][gqa][kv_state]") {
  GqaCase c;
  const Graph graph = gqa_node(c, make_data(c, 3)).graph();
  SessionOptions so;
  so.kv_state_inputs = {"in3"};  // the value cache is not named
  Session s(graph, default_op_registry(), so);
  CHECK(!s.keeps_kv_state());
  CHECK(s.output_names().size() == 3);
}

TEST_CASE("SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization", "[genai][norm]") {
  const int64_t rows = 3, d = 40;
  const std::vector<float> x = randn(static_cast<size_t>(rows * d), 1), skip = randn(static_cast<size_t>(rows * d), 2);
  const std::vector<float> w = randn(static_cast<size_t>(d), 3), bias = randn(static_cast<size_t>(d), 4);
  const float eps = 1e-5f;
  std::vector<double> sum(x.size()), y(x.size()), y_plain(x.size()), inv(static_cast<size_t>(rows)), inv_plain(inv);
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0, sq_plain = 0;
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      sum[k] = static_cast<double>(x[k]) + skip[k] + bias[static_cast<size_t>(i)];
      sq += sum[k] * sum[k];
      sq_plain += static_cast<double>(x[k]) * x[k];
    }
    inv[static_cast<size_t>(r)] = 1.0 / std::sqrt(sq / d + eps);
    inv_plain[static_cast<size_t>(r)] = 1.0 / std::sqrt(sq_plain / d + eps);
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      y[k] = sum[k] * inv[static_cast<size_t>(r)] * w[static_cast<size_t>(i)];
      y_plain[k] = x[k] * inv_plain[static_cast<size_t>(r)] * w[static_cast<size_t>(i)];
    }
  }
  const auto out = OpTest("SkipSimplifiedLayerNormalization", 1, "com.microsoft")
                       .attr("epsilon", eps)
                       .input(make_tensor<float>({1, rows, d}, x))
                       .input(make_tensor<float>({1, rows, d}, skip))
                       .constant(make_tensor<float>({d}, w))
                       .constant(make_tensor<float>({d}, bias))
                       .outputs(4)
                       .run();
  REQUIRE(out.size() == 4);
  CHECK(all_close(to_doubles(out[0]), y, 1e-5, 1e-6));
  CHECK(out[2].shape() == Shape{1, rows, 1});
  CHECK(all_close(to_doubles(out[2]), inv, 1e-5, 1e-6));
  CHECK(all_close(to_doubles(out[3]), sum, 1e-6, 1e-6));
  // Only output 0 asked for (the sum then stays internal), no bias given: still a skip + norm.
  const auto only = OpTest("SkipSimplifiedLayerNormalization", 1, "com.microsoft")
                        .attr("epsilon", eps)
                        .input(make_tensor<float>({rows, d}, x))
                        .input(make_tensor<float>({rows, d}, skip))
                        .constant(make_tensor<float>({d}, w))
                        .run1();
  CHECK(only.shape() == Shape{rows, d});
  const auto plain = OpTest("SimplifiedLayerNormalization", 1)
                         .attr("epsilon", eps)
                         .attr("axis", int64_t{-1})
                         .input(make_tensor<float>({rows, d}, x))
                         .constant(make_tensor<float>({d}, w))
                         .outputs(2)
                         .run();
  CHECK(all_close(to_doubles(plain[0]), y_plain, 1e-5, 1e-6));
  CHECK(all_close(to_doubles(plain[1]), inv_plain, 1e-5, 1e-6));
  CHECK_THROWS_AS(OpTest("SkipSimplifiedLayerNormalization", 1, "com.microsoft")
                      .input(make_tensor<float>({rows, d}, x))
                      .input(make_tensor<float>({rows, d}, skip))
                      .constant(make_tensor<float>({d - 1}, std::vector<float>(static_cast<size_t>(d - 1), 1.0f)))
                      .run(),
                  Error);
}

TEST_CASE("SkipLayerNormalization: mean subtracted, beta and bias, every output, float32 and float16", "[genai][norm]") {
  const int64_t rows = 3, d = 40;
  std::vector<float> x = randn(static_cast<size_t>(rows * d), 11), skip = randn(static_cast<size_t>(rows * d), 12);
  std::vector<float> w = randn(static_cast<size_t>(d), 13), beta = randn(static_cast<size_t>(d), 14),
                     bias = randn(static_cast<size_t>(d), 15);
  for (std::vector<float>* v : {&x, &skip, &w, &beta, &bias})
    for (float& f : *v) f = half_to_float(float_to_half(f + 0.5f));  // float16 holds them; the rows' means are not 0
  const float eps = 1e-5f;
  std::vector<double> sum(x.size()), y(x.size()), mean(static_cast<size_t>(rows)), inv(mean);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      sum[k] = static_cast<double>(x[k]) + skip[k] + bias[static_cast<size_t>(i)];
      m += sum[k];
    }
    m /= d;
    for (int64_t i = 0; i < d; ++i) {
      const double c = sum[static_cast<size_t>(r * d + i)] - m;
      var += c * c;
    }
    mean[static_cast<size_t>(r)] = m;
    inv[static_cast<size_t>(r)] = 1.0 / std::sqrt(var / d + eps);
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      y[k] = (sum[k] - m) * inv[static_cast<size_t>(r)] * w[static_cast<size_t>(i)] + beta[static_cast<size_t>(i)];
    }
  }
  for (DType t : {DType::F32, DType::F16}) {
    INFO(dtype_name(t));
    auto ten = [&](Shape shape, const std::vector<float>& v) {
      return make_tensor_as(t, std::move(shape), std::vector<double>(v.begin(), v.end()));
    };
    const auto out = OpTest("SkipLayerNormalization", 1, "com.microsoft")
                         .attr("epsilon", eps)
                         .input(ten({1, rows, d}, x))
                         .input(ten({1, rows, d}, skip))
                         .constant(ten({d}, w))
                         .constant(ten({d}, beta))
                         .constant(ten({d}, bias))
                         .outputs(4)
                         .run();
    REQUIRE(out.size() == 4);
    const double tol = t == DType::F32 ? 1e-5 : 2e-3;
    CHECK(out[0].dtype() == t);
    CHECK(all_close(to_doubles(out[0]), y, tol, tol));
    CHECK(out[1].shape() == Shape{1, rows, 1});
    CHECK(all_close(to_doubles(out[1]), mean, 1e-5, 1e-6));
    CHECK(all_close(to_doubles(out[2]), inv, 1e-5, 1e-6));
    CHECK(all_close(to_doubles(out[3]), sum, tol, tol));
  }
  // No beta, no bias: (s − mean) · inv · gamma.
  const Tensor plain = OpTest("SkipLayerNormalization", 1, "com.microsoft")
                           .attr("epsilon", eps)
                           .input(make_tensor<float>({rows, d}, x))
                           .input(make_tensor<float>({rows, d}, skip))
                           .constant(make_tensor<float>({d}, w))
                           .run1();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * d;
    const float* kr = skip.data() + r * d;
    double m = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) m += static_cast<double>(xr[i]) + kr[i];
    m /= d;
    for (int64_t i = 0; i < d; ++i) var += (static_cast<double>(xr[i]) + kr[i] - m) * (static_cast<double>(xr[i]) + kr[i] - m);
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      const double want = (static_cast<double>(xr[i]) + kr[i] - m) / std::sqrt(var / d + eps) * w[static_cast<size_t>(i)];
      CHECK(std::fabs(plain.data<float>()[k] - want) <= 1e-5 * (1 + std::fabs(want)));
    }
  }
  CHECK_THROWS_WITH(OpTest("SkipLayerNormalization", 1, "com.microsoft")
                        .input(make_tensor<float>({rows, d}, x))
                        .input(make_tensor<float>({rows, d}, skip))
                        .constant(make_tensor<float>({d}, w))
                        .constant(make_tensor<float>({d - 1}, std::vector<float>(static_cast<size_t>(d - 1), 0.0f)))
                        .run(),
                    Catch::Contains("beta"));
}

TEST_CASE("GatherBlockQuantized: 4-bit rows default and given zero points int4", "[genai][gather]") {
  const int64_t rows = 5, k = 64, block = 32, blocks = 2;
  std::mt19937 rng(5);
  std::vector<int> q(static_cast<size_t>(rows * k));
  for (int& v : q) v = static_cast<int>(rng() % 16);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * k / 2));
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
  const std::vector<float> scales = randn(static_cast<size_t>(rows * blocks), 9);
  const std::vector<uint8_t> zp = {0x3A, 0x11, 0xF0, 0x77, 0x05};  // [rows, ceil(2/2)]: blocks 0 (low), 1 (high)
  const std::vector<int64_t> idx = {4, 0, -1, 2};
  auto expect = [&](bool with_zp, bool signed_table) {
    std::vector<double> out;
    for (int64_t i : idx) {
      const int64_t r = i < 0 ? i + rows : i;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t b = c / block;
        int qv = q[static_cast<size_t>(r * k + c)];
        int z = with_zp ? ((zp[static_cast<size_t>(r)] >> (4 * b)) & 0x0F) : (signed_table ? 0 : 8);
        if (signed_table) qv = (qv ^ 8) - 8;
        out.push_back((qv - z) * static_cast<double>(scales[static_cast<size_t>(r * blocks + b)]));
      }
    }
    return out;
  };
  auto node = [&]() {
    OpTest t("GatherBlockQuantized", 1, "com.microsoft");
    t.attr("block_size", block).attr("bits", int64_t{4}).attr("gather_axis", int64_t{0}).attr("quantize_axis", int64_t{1});
    return t;
  };
  Tensor table = make_tensor<uint8_t>({rows, k / 2}, packed);
  Tensor s = make_tensor<float>({rows, blocks}, scales);
  Tensor ids = make_tensor<int64_t>({2, 2}, idx);
  const Tensor y = node().constant(table).input(ids).constant(s).run1();
  CHECK(y.shape() == Shape{2, 2, k});
  CHECK(all_close(to_doubles(y), expect(false, false), 1e-6, 1e-7));
  const Tensor yz = node().constant(table).input(ids).constant(s).constant(make_tensor<uint8_t>({rows, 1}, zp)).run1();
  CHECK(all_close(to_doubles(yz), expect(true, false), 1e-6, 1e-7));
  Tensor int4 = Tensor::allocate(DType::I4, {rows, k});
  std::memcpy(int4.raw(), packed.data(), packed.size());
  const Tensor y4 = node().constant(int4).input(ids).constant(s).run1();
  CHECK(all_close(to_doubles(y4), expect(false, true), 1e-6, 1e-7));
  OpTest axis1 = node();
  axis1.attr("gather_axis", int64_t{1});
  CHECK_THROWS_AS(axis1.constant(table).input(ids).constant(s).run(), Error);
  CHECK_THROWS_AS(node().constant(table).input(make_tensor<int64_t>({1}, {rows})).constant(s).run(), Error);
}
