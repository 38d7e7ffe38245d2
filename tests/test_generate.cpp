// The greedy generator on a small causal LM built in code (a stacked cache
// [2, 1, 1, past, 4] and logits over an 8-token vocabulary): cached and
// uncached decoding choose the same tokens, EOS stops it, the context limit
// is enforced, and after the generator reserves for its last step a whole
// decode loop allocates no buffers.
#include <catch2/catch.hpp>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "models/causal_lm.h"
#include "models/generate.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7;
constexpr int64_t kVocab = 8, kDim = 4;

// logits[t] = (mean of embeddings so far, via the cache) · W: depends on the
// whole prefix, so a wrong cache changes the tokens.
ModelBuilder tiny_lm(bool cached) {
  ModelBuilder b;
  b.input("input_ids", kInt64, {1, -1}).output("logits", kFloat, {1, -1, kVocab});
  std::vector<float> emb(kVocab * kDim), w(kDim * kVocab);
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = static_cast<float>((i * 7) % 11) / 5.f - 1.f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 5) % 13) / 6.f - 1.f;
  b.initializer<float>("E", kFloat, {kVocab, kDim}, emb);
  b.initializer<float>("W", kFloat, {kDim, kVocab}, w);
  b.initializer<int64_t>("ax02", kInt64, {2}, {0, 2});
  b.initializer<int64_t>("ax", kInt64, {1}, {-2});
  b.node("Gather", {"E", "input_ids"}, {"x"});                 // [1, S, 4]
  if (cached) {
    b.input("past", kFloat, {2, 1, 1, -1, kDim}).output("present", kFloat, {2, 1, 1, -1, kDim});
    b.node("Unsqueeze", {"x", "ax02"}, {"x5"});                // [1, 1, 1, S, 4]
    ModelBuilder::attr_int(b.node("Concat", {"x5", "x5"}, {"kv"}), "axis", 0);
    ModelBuilder::attr_int(b.node("Concat", {"past", "kv"}, {"present"}), "axis", 3);
    // Running sum over all positions: the mean of present[0] up to each new row.
    b.initializer<int64_t>("zero", kInt64, {1}, {0});
    b.initializer<int64_t>("one", kInt64, {1}, {1});
    b.node("Slice", {"present", "zero", "one", "zero"}, {"k"});  // [1, 1, 1, T, 4]
    b.initializer<int64_t>("sq", kInt64, {3}, {0, 1, 2});
    b.node("Squeeze", {"k", "sq"}, {"k2"});                     // [T, 4]
    ModelBuilder::attr_int(b.node("CumSum", {"k2", "zero"}, {"cs"}), "exclusive", 0);
    // The last S rows of the running sum.
    b.node("Shape", {"x"}, {"xs"});
    b.node("Gather", {"xs", "one"}, {"s1"});
    b.node("Neg", {"s1"}, {"ns"});
    b.initializer<int64_t>("big", kInt64, {1}, {INT64_MAX});
    b.node("Slice", {"cs", "ns", "big", "zero"}, {"tail"});     // [S, 4]
    b.node("Unsqueeze", {"tail", "zero"}, {"h"});               // [1, S, 4]
  } else {
    b.initializer<int64_t>("one", kInt64, {1}, {1});
    ModelBuilder::attr_int(b.node("CumSum", {"x", "one"}, {"h"}), "exclusive", 0);
  }
  b.node("MatMul", {"h", "W"}, {"logits"});
  return b;
}

Session open(bool cached, const std::string& name, bool last_position = false) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  tiny_lm(cached).save(path);
  SessionOptions o;
  if (last_position) o.last_position_outputs = {"logits"};
  return Session(load_onnx(path), default_op_registry(), o);
}

}  // namespace

TEST_CASE("generate: cached and uncached choose the same tokens", "[generate]") {
  Session plain = open(false, "gen_plain"), cached = open(true, "gen_cached");
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.keep_logits = true;
  const GenerateResult a = Generator(plain, bind_causal_lm(plain.graph())).run({1, 5, 2}, o);
  const GenerateResult b = Generator(cached, bind_causal_lm(cached.graph())).run({1, 5, 2}, o);
  REQUIRE(a.tokens.size() == 20);
  CHECK(a.tokens == b.tokens);
  REQUIRE(a.logits.size() == b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) CHECK(a.logits[i] == Approx(b.logits[i]).margin(1e-5));
}

TEST_CASE("generate: last-position logits choose the same tokens with the same logits", "[generate]") {
  for (bool cached : {false, true}) {
    Session full = open(cached, "gen_full"), last = open(cached, "gen_last", true);
    CHECK(last.pass_report().get("last_position") == 1);
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.keep_logits = true;
    const GenerateResult a = Generator(full, bind_causal_lm(full.graph())).run({1, 5, 2}, o);
    const GenerateResult b = Generator(last, bind_causal_lm(last.graph())).run({1, 5, 2}, o);
    CHECK(a.tokens == b.tokens);
    REQUIRE(a.logits.size() == b.logits.size());
    // One row instead of S may change the summation order (gemv vs gemm tile).
    for (size_t i = 0; i < a.logits.size(); ++i) CHECK(a.logits[i] == Approx(b.logits[i]).margin(1e-5));
  }
}

TEST_CASE("generate: stops at EOS and at the context", "[generate]") {
  Session s = open(true, "gen_stop");
  Generator g(s, bind_causal_lm(s.graph()));
  GenerateOptions o;
  o.max_new_tokens = 50;
  const GenerateResult free_run = g.run({1, 5, 2}, o);
  o.eos_ids = {free_run.tokens[3]};
  const GenerateResult eos = g.run({1, 5, 2}, o);
  CHECK(eos.stopped_at_eos);
  CHECK(eos.tokens.size() <= 4);
  o.eos_ids.clear();
  o.max_context = 10;
  const GenerateResult ctx = g.run({1, 5, 2}, o);
  CHECK(ctx.stopped_at_context);
  CHECK(ctx.prompt.size() + ctx.tokens.size() == 10);
  o.max_context = 3;
  CHECK_THROWS_WITH(g.run({1, 5, 2}, o), Catch::Contains("prompt is 3 tokens") && Catch::Contains("context is 3"));
}

TEST_CASE("generate: a decode loop allocates no buffers after its reserve", "[generate][memory]") {
  // Allocations happen in the reserves before the first step (prefill and
  // last-step shapes: one arena, two buffers per output each); their count
  // does not depend on how many steps follow, and a second loop adds none.
  auto loop = [](int64_t steps, const std::string& name) {
    Session s = open(true, name);
    Generator g(s, bind_causal_lm(s.graph()));
    GenerateOptions o;
    o.max_new_tokens = steps;
    g.run({1, 5, 2}, o);
    const Session::Stats first = s.stats();
    g.run({1, 5, 2}, o);
    CHECK(s.stats().arena_allocations == first.arena_allocations);
    CHECK(s.stats().output_allocations == first.output_allocations);
    return first;
  };
  const Session::Stats short_run = loop(10, "gen_alloc_10"), long_run = loop(80, "gen_alloc_80");
  CHECK(short_run.arena_allocations == 1);
  CHECK(long_run.arena_allocations == 1);
  CHECK(long_run.output_allocations == short_run.output_allocations);
  CHECK(long_run.output_allocations <= 8);
}
