// The greedy generator on a small causal LM built in code (a stacked cache
// [2, 1, 1, past, 4] and logits over an 8-token vocabulary): cached and
// uncached decoding choose the same tokens, EOS stops it, the context limit
// is enforced, and after the generator reserves for its last step a whole
// decode loop allocates no buffers.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "models/causal_lm.h"
#include "models/generate.h"
#include "models/lookup.h"
#include "models/sampler.h"
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
  CHECK(eos.stop == StopReason::Eos);
  CHECK(eos.tokens.size() <= 4);
  o.eos_ids.clear();
  o.max_context = 10;
  const GenerateResult ctx = g.run({1, 5, 2}, o);
  CHECK(ctx.stop == StopReason::Context);
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

namespace {

Session open_threads(bool cached, const std::string& name, int threads) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  tiny_lm(cached).save(path);
  SessionOptions o;
  o.threads = threads;
  o.last_position_outputs = {"logits"};
  return Session(load_onnx(path), default_op_registry(), o);
}

GenerateOptions sampled(Sampler& s, int64_t n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.choose = [&s](const float* l, int64_t v, std::span<const int32_t> h) { return s.sample(l, v, h); };
  return o;
}

}  // namespace

TEST_CASE("generate: extend prefills only the new tokens and continues as a fresh run would", "[generate]") {
  for (bool cached : {false, true}) {
    Session s = open(cached, cached ? "gen_extend_cached" : "gen_extend_plain");
    Generator g(s, bind_causal_lm(s.graph()));
    GenerateOptions o;
    o.max_new_tokens = 6;
    const GenerateResult first = g.run({1, 5, 2}, o);
    CHECK(first.prefill_tokens == 3);
    CHECK(g.cached_positions() == (cached ? 8 : 0));  // the last chosen token is not run yet
    const GenerateResult second = g.extend({3, 4}, o);
    // The last chosen token and the two new ones; without a cache, everything.
    CHECK(second.past == (cached ? 8 : 0));
    CHECK(second.prefill_tokens == (cached ? 3 : 11));
    std::vector<int32_t> whole = {1, 5, 2};
    whole.insert(whole.end(), first.tokens.begin(), first.tokens.end());
    whole.insert(whole.end(), {3, 4});
    const std::vector<int32_t> before_second(g.sequence().begin(), g.sequence().begin() + 11);
    CHECK(before_second == whole);
    const GenerateResult fresh = g.run(whole, o);
    CHECK(fresh.tokens == second.tokens);

    // drop_last: the last chosen token can be taken back, not one the cache holds.
    g.run({1, 5, 2}, o);
    g.drop_last();
    CHECK(g.sequence().size() == 8);
    if (cached) CHECK_THROWS_WITH(g.drop_last(), Catch::Contains("already holds"));
    const GenerateResult after_drop = g.extend({6}, o);
    CHECK(after_drop.prefill_tokens == (cached ? 1 : 9));
  }
}

TEST_CASE("generate: extend refuses a sequence past the context and changes nothing", "[generate]") {
  Session s = open(true, "gen_extend_ctx");
  Generator g(s, bind_causal_lm(s.graph()));
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.max_context = 12;
  g.run({1, 5, 2}, o);
  const std::vector<int32_t> before = g.sequence();
  CHECK_THROWS_WITH(g.extend({1, 2, 3, 4, 5}, o), Catch::Contains("would be 12 tokens") && Catch::Contains("context is 12"));
  CHECK(g.sequence() == before);
  o.max_new_tokens = 10;
  const GenerateResult r = g.extend({1}, o);
  CHECK(r.stop == StopReason::Context);
  CHECK(g.sequence().size() == 12);
}

TEST_CASE("generate: a seeded sampler gives the same tokens twice and across thread counts", "[generate][sampler]") {
  SamplingParams sp;
  sp.temperature = 1.5f;  // the tiny model's logits are close: many tokens stay likely
  sp.seed = 1234;
  std::vector<std::vector<int32_t>> runs;
  for (int threads : {1, 2, 1}) {
    Session s = open_threads(true, "gen_seed_t" + std::to_string(threads), threads);
    Generator g(s, bind_causal_lm(s.graph()));
    Sampler sampler(sp);
    runs.push_back(g.run({1, 5, 2}, sampled(sampler, 40)).tokens);
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
  // Not greedy in disguise: the draws pick other tokens than argmax does.
  Session s = open(true, "gen_seed_greedy");
  GenerateOptions greedy;
  greedy.max_new_tokens = 40;
  CHECK(Generator(s, bind_causal_lm(s.graph())).run({1, 5, 2}, greedy).tokens != runs[0]);
}

TEST_CASE("generate: a top-k 1 sampler chooses the greedy tokens", "[generate][sampler]") {
  Session s = open(true, "gen_topk1");
  Generator g(s, bind_causal_lm(s.graph()));
  GenerateOptions greedy;
  greedy.max_new_tokens = 30;
  const GenerateResult a = g.run({1, 5, 2}, greedy);
  SamplingParams sp;
  sp.top_k = 1;
  sp.seed = 99;
  Sampler sampler(sp);
  const GenerateResult b = g.run({1, 5, 2}, sampled(sampler, 30));
  CHECK(a.tokens == b.tokens);
}

TEST_CASE("generate: the interrupt flag stops between tokens", "[generate]") {
  Session s = open(true, "gen_interrupt");
  Generator g(s, bind_causal_lm(s.graph()));
  std::atomic<bool> stop{false};
  GenerateOptions o;
  o.max_new_tokens = 20;
  o.interrupt = &stop;
  int seen = 0;
  const GenerateResult r = g.run({1, 5, 2}, o, [&](int32_t) {
    if (++seen == 3) stop = true;
  });
  CHECK(r.stop == StopReason::Interrupted);
  CHECK(r.tokens.size() == 3);
  // Set before the first pass: nothing runs, and the prompt waits in the sequence.
  const GenerateResult none = g.run({1, 5, 2}, o);
  CHECK(none.tokens.empty());
  CHECK(g.cached_positions() == 0);
  CHECK(g.sequence().size() == 3);
  stop = false;
  CHECK(g.extend({}, o).prefill_tokens == 3);
}

// Exact lookup decoding (models/lookup.h).

TEST_CASE("lookup_draft: the continuation of the latest earlier occurrence of the last n-gram", "[generate][lookup]") {
  using V = std::vector<int32_t>;
  CHECK(lookup_draft(V{}, 4).empty());
  CHECK(lookup_draft(V{1, 2, 3, 4, 5}, 4).empty());       // nothing recurs
  CHECK(lookup_draft(V{1, 2, 3, 1, 2}, 4) == V{3, 1, 2});  // "1 2" at 0: what followed, to the end
  CHECK(lookup_draft(V{1, 2, 3, 1, 2}, 2) == V{3, 1});     // at most max_tokens
  CHECK(lookup_draft(V{1, 2, 3, 1, 2}, 0).empty());
  CHECK(lookup_draft(V{5, 1, 2, 7, 1, 2}, 1) == V{7});
  // The most recent occurrence wins: "1 2" at 3 (followed by 8), not at 0.
  CHECK(lookup_draft(V{1, 2, 9, 1, 2, 8, 4, 1, 2}, 2) == V{8, 4});
  // The longest n-gram wins: "3 1 2" occurs once (then 6), "1 2" later (then 7).
  CHECK(lookup_draft(V{3, 1, 2, 6, 1, 2, 7, 3, 1, 2}, 1) == V{6});
  // One recurring token is not a match (kLookupMinNgram = 2).
  CHECK(lookup_draft(V{4, 9, 5, 4}, 3).empty());
  // A run of one token: the match nearest the end overlaps the key.
  CHECK(lookup_draft(V{7, 7, 7, 7}, 3) == V{7});
}

TEST_CASE("LookupBudget: drafts grow while kept whole and shrink when refused", "[generate][lookup]") {
  LookupBudget b(8);
  CHECK(b.cap() == 1);  // text that never repeats pays for one drafted row at a time
  b.update(1, 1);
  CHECK(b.cap() == 2);
  b.update(2, 2);
  b.update(4, 4);
  CHECK(b.cap() == 8);
  b.update(8, 8);
  CHECK(b.cap() == 8);  // never past --lookup
  b.update(8, 3);       // kept in part: unchanged
  CHECK(b.cap() == 8);
  b.update(8, 0);
  CHECK(b.cap() == 4);
  b.update(0, 0);       // no draft: unchanged
  CHECK(b.cap() == 4);
  for (int i = 0; i < 5; ++i) b.update(b.cap(), 0);
  CHECK(b.cap() == 1);
  CHECK(LookupBudget(0).cap() == 0);
}

namespace {

Session open_rows(bool cached, const std::string& name) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  tiny_lm(cached).save(path);
  SessionOptions o;
  o.last_position_outputs = {"logits"};
  o.last_rows_input = true;
  return Session(load_onnx(path), default_op_registry(), o);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("lookup decoding chooses greedy's tokens with greedy's logits, cached and uncached", "[generate][lookup]") {
  std::mt19937 rng(11);
  for (bool cached : {false, true})
    for (bool rows : {false, true}) {
      INFO((cached ? "cached" : "uncached") << (rows ? ", last rows kept" : ", every row kept"));
      Session s = rows ? open_rows(cached, "lookup_rows") : open(cached, "lookup_full");
      if (rows) CHECK(s.pass_report().get("last_position") == 1);
      Generator g(s, bind_causal_lm(s.graph()));
      int64_t drafted = 0, accepted = 0, fewer_passes = 0;
      for (int prompt = 0; prompt < 60; ++prompt) {
        std::vector<int32_t> ids(2 + rng() % 9);
        for (int32_t& id : ids) id = static_cast<int32_t>(rng() % kVocab);
        GenerateOptions o;
        o.max_new_tokens = 1 + static_cast<int64_t>(rng() % 30);
        o.keep_logits = true;
        const GenerateResult want = g.run(ids, o);
        for (int64_t n : {1, 3, 8}) {
          o.lookup = n;
          const GenerateResult got = g.run(ids, o);
          INFO("prompt " << prompt << ", lookup " << n << ", " << o.max_new_tokens << " tokens");
          CHECK(got.tokens == want.tokens);
          CHECK(same_bits(got.logits, want.logits));
          CHECK(got.stop == want.stop);
          CHECK(got.accepted <= got.drafted);
          CHECK(got.passes == static_cast<int64_t>(got.tokens.size()) - got.accepted);
          // The cache keeps the kept drafts: all but the last token, as greedy.
          if (cached) CHECK(g.cached_positions() == static_cast<int64_t>(g.sequence().size()) - 1);
          drafted += got.drafted;
          accepted += got.accepted;
          fewer_passes += got.passes < want.passes;
        }
      }
      // Both ways a draft ends were taken: tokens kept and tokens refused.
      CHECK(accepted > 0);
      CHECK(drafted > accepted);
      CHECK(fewer_passes > 0);
    }
}

TEST_CASE("lookup decoding stops where greedy stops and a chat continues from it", "[generate][lookup]") {
  for (bool cached : {false, true}) {
    INFO((cached ? "cached" : "uncached"));
    Session a = open_rows(cached, "lookup_stop_a"), b = open_rows(cached, "lookup_stop_b");
    Generator plain(a, bind_causal_lm(a.graph())), fast(b, bind_causal_lm(b.graph()));
    GenerateOptions o;
    o.max_new_tokens = 40;
    const GenerateResult free_run = plain.run({1, 5, 2, 1, 5}, o);
    GenerateOptions l = o;
    l.lookup = 6;
    // EOS, possibly chosen inside an accepted draft: the generation ends there.
    for (size_t at : {size_t{2}, size_t{9}, size_t{25}}) {
      o.eos_ids = l.eos_ids = {free_run.tokens[at]};
      const GenerateResult want = plain.run({1, 5, 2, 1, 5}, o), got = fast.run({1, 5, 2, 1, 5}, l);
      CHECK(got.tokens == want.tokens);
      CHECK(got.stop == StopReason::Eos);
      // The cache holds all but the last token, as without lookup: it can be taken back.
      CHECK(fast.cached_positions() == plain.cached_positions());
      plain.drop_last();
      fast.drop_last();
      // The next turn prefills after what the cache kept.
      const GenerateResult want2 = plain.extend({3, 1, 5}, o), got2 = fast.extend({3, 1, 5}, l);
      CHECK(got2.tokens == want2.tokens);
      CHECK(fast.sequence() == plain.sequence());
    }
    o.eos_ids = l.eos_ids = {};
    o.max_context = l.max_context = 17;
    const GenerateResult want = plain.run({1, 5, 2, 1, 5}, o), got = fast.run({1, 5, 2, 1, 5}, l);
    CHECK(got.stop == StopReason::Context);
    CHECK(got.tokens == want.tokens);
    // Sampling is not greedy: lookup refuses it.
    l.choose = [](const float*, int64_t, std::span<const int32_t>) { return 0; };
    CHECK_THROWS_WITH(fast.run({1, 5, 2}, l), Catch::Contains("cannot sample"));
  }
}

TEST_CASE("lookup decoding needs the rows it verifies", "[generate][lookup]") {
  // A session that keeps one row of the logits cannot verify a draft: an
  // error naming the option, not a wrong token.
  Session s = open(true, "lookup_one_row", true);
  Generator g(s, bind_causal_lm(s.graph()));
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.lookup = 4;
  CHECK_THROWS_WITH(g.run({1, 2, 1, 2, 1, 2}, o), Catch::Contains("last_rows_input"));
}
