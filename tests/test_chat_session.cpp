// The chat loop (models/chat_session.h) on the tiny Qwen3 export: three
// turns read from a stream, as from a pipe. Each later turn prefills only
// its own tokens (counted), and each answer is token for token what a fresh
// run on the conversation so far chooses. Also: a stop string split over two
// tokens, the same seed across thread counts on real logits, the commands,
// and a model without a cache (every turn re-runs the conversation).
//
// The cases need the export (ctest fixture tiny_qwen3), so they are hidden
// ("[.tiny]") and run by the ctest entry chat_session_tiny with ONEBIT_TINY
// set (tests/model_tests.cmake). The template cases run everywhere.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "models/chat.h"
#include "models/chat_session.h"
#include "models/model.h"
#include "models/sampler.h"
#include "ops/kv_store.h"
#include "models/tokenizer/tokenizer.h"

using namespace onebit;

namespace {

std::string tiny_dir() {
  const char* d = std::getenv("ONEBIT_TINY");
  const std::string dir = d ? d : std::string(ONEBIT_BINARY_DIR) + "/models/qwen3-tiny";
  if (!std::filesystem::exists(dir + "/model-cached.onnx"))
    FAIL(dir << "/model-cached.onnx not found: run ctest -R export_tiny_qwen3 first");
  return dir;
}

std::unique_ptr<Model> open_tiny(const std::string& file, int threads = 0) {
  ModelOptions o;
  o.session.threads = threads;
  o.need_tokenizer = true;
  return Model::open(tiny_dir() + "/" + file, o);
}

// Lines from a string, as the CLI reads them from a pipe.
class StringLines : public LineReader {
 public:
  explicit StringLines(const std::string& text) : in_(text) {}
  Status read(const std::string&, std::string& line) override {
    return std::getline(in_, line) ? Status::Line : Status::End;
  }

 private:
  std::istringstream in_;
};

struct Turn {
  std::string user;
  GenerateResult r;
};

std::vector<Turn> drive(ChatSession& chat, const std::string& input, std::string* shown = nullptr,
                        std::string* notices = nullptr) {
  std::vector<Turn> turns;
  StringLines lines(input);
  ChatLoopIo io;
  io.answer = [&](std::string_view s) {
    if (shown) *shown += s;
  };
  io.notice = [&](std::string_view s) {
    if (notices) *notices += s;
  };
  io.on_answer = [&](const std::string& user, const GenerateResult& r) { turns.push_back({user, r}); };
  chat_loop(chat, lines, io);
  return turns;
}

// The conversation before each answer, rebuilt from the turns: each turn's
// appended tokens follow the previous answer, whose end-of-sequence id, if
// it ended with one, the next turn's <|im_end|> replaced.
std::vector<std::vector<int32_t>> contexts(const std::vector<Turn>& turns) {
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> seq;
  for (size_t t = 0; t < turns.size(); ++t) {
    if (t > 0 && turns[t - 1].r.stop == StopReason::Eos) seq.pop_back();
    seq.insert(seq.end(), turns[t].r.prompt.begin(), turns[t].r.prompt.end());
    out.push_back(seq);
    seq.insert(seq.end(), turns[t].r.tokens.begin(), turns[t].r.tokens.end());
  }
  return out;
}

const char* kThreeTurns = "Hello, who are you?\nWhat is two plus two?\nThank you!\n";

void check_three_turns(Model& model, const std::vector<Turn>& turns, const GenerateOptions& o) {
  REQUIRE(turns.size() == 3);
  const ChatTemplate tmpl = ChatTemplate::parse(model.files().chat_template, "tiny");
  const auto ctx = contexts(turns);
  for (size_t t = 1; t < 3; ++t) {
    const std::vector<int32_t> own =
        model.tokenizer()->encode(tmpl.next_turn(turns[t].user), true, /*add_special=*/false);
    CHECK(turns[t].r.prompt == own);
    // Only the turn's own tokens, and the last answer's final token when it
    // was not an end of sequence (chosen, never run).
    const bool eos = turns[t - 1].r.stop == StopReason::Eos;
    CHECK(turns[t].r.prefill_tokens == static_cast<int64_t>(own.size()) + (eos ? 0 : 1));
    CHECK(turns[t].r.past == static_cast<int64_t>(ctx[t].size() - own.size()) - (eos ? 0 : 1));
  }
  // A fresh run on each conversation so far chooses the same answer.
  for (size_t t = 0; t < 3; ++t) {
    const GenerateResult fresh = model.generator().run(ctx[t], o);
    INFO("turn " << t + 1);
    CHECK(fresh.tokens == turns[t].r.tokens);
  }
}

}  // namespace

TEST_CASE("chat template: the conversation renders as the first turn, each answer and each next turn",
          "[chat]") {
  const std::string smol =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  const ChatTemplate t = ChatTemplate::parse(smol, "smol");
  CHECK(t.default_system() == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::vector<ChatMessage> all = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}, {"assistant", "4"},
                                        {"user", "Thanks"}};
  const std::string incremental =
      t.render({all[0]}, true) + "Hello!" + t.next_turn("2+2?") + "4" + t.next_turn("Thanks");
  CHECK(incremental == t.render(all, true));
  CHECK(t.render({{"system", "Be brief."}, {"user", "Hi"}}, true) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK_THROWS_WITH(ChatTemplate::parse("{{ bos }}[INST] x [/INST]", "llama"), Catch::Contains("ChatML"));
  CHECK_THROWS_WITH(ChatTemplate::parse("", "none"), Catch::Contains("no"));
}

TEST_CASE("chat: three turns through a pipe, each prefilling its own tokens, answers as fresh runs", "[.tiny]") {
  std::unique_ptr<Model> model = open_tiny("model-cached.onnx");
  REQUIRE(model->generator().cached());
  ChatOptions co;
  co.generate.max_new_tokens = 12;
  ChatSession chat(*model, co);
  std::string shown;
  const std::vector<Turn> turns = drive(chat, kThreeTurns, &shown);
  GenerateOptions o = chat.generate_options();
  o.on_text = nullptr;
  check_three_turns(*model, turns, o);
  // What the loop printed is each answer's text and a newline.
  CHECK(shown == turns[0].r.text + "\n" + turns[1].r.text + "\n" + turns[2].r.text + "\n");
}

TEST_CASE("chat: answers that end at an end-of-sequence id give it back to the template", "[.tiny]") {
  std::unique_ptr<Model> model = open_tiny("model-cached.onnx");
  // Make the random-weight model end its answers: the token it chooses
  // fourth in the first answer counts as an end of sequence.
  ChatOptions probe;
  probe.generate.max_new_tokens = 8;
  int32_t eos = -1;
  {
    ChatSession chat(*model, probe);
    eos = chat.say("Hello, who are you?").tokens.at(3);
  }
  ChatOptions co;
  co.generate.max_new_tokens = 8;
  co.generate.eos_ids = {eos};
  ChatSession chat(*model, co);
  const std::vector<Turn> turns = drive(chat, kThreeTurns);
  REQUIRE(turns.size() == 3);
  CHECK(turns[0].r.stop == StopReason::Eos);
  GenerateOptions o = chat.generate_options();
  o.on_text = nullptr;
  check_three_turns(*model, turns, o);
  // The conversation holds the template's <|im_end|>, not the answer's id.
  const auto& seq = chat.tokens();
  const int32_t im_end = model->tokenizer()->token_to_id("<|im_end|>");
  const auto ctx = contexts(turns);
  CHECK(seq[ctx[0].size() + turns[0].r.tokens.size() - 1] == im_end);
}

TEST_CASE("chat: without a cache every turn re-runs the whole conversation", "[.tiny]") {
  std::unique_ptr<Model> model = open_tiny("model.onnx");
  REQUIRE_FALSE(model->generator().cached());
  ChatOptions co;
  co.generate.max_new_tokens = 6;
  ChatSession chat(*model, co);
  const std::vector<Turn> turns = drive(chat, kThreeTurns);
  REQUIRE(turns.size() == 3);
  const auto ctx = contexts(turns);
  for (size_t t = 0; t < 3; ++t) CHECK(turns[t].r.prefill_tokens == static_cast<int64_t>(ctx[t].size()));
}

TEST_CASE("chat: /reset, /system, unknown commands", "[.tiny]") {
  std::unique_ptr<Model> model = open_tiny("model-cached.onnx");
  ChatOptions co;
  co.generate.max_new_tokens = 4;
  ChatSession chat(*model, co);
  std::string notices;
  const std::vector<Turn> turns =
      drive(chat, "Hi\n/reset\nHi\n/system Answer in French.\n/system\nHi\n/frobnicate\n/exit\nnever read\n", nullptr,
            &notices);
  REQUIRE(turns.size() == 3);
  // After /reset the same first turn starts from an empty cache, with the same answer.
  CHECK(turns[1].r.past == 0);
  CHECK(turns[1].r.tokens == turns[0].r.tokens);
  CHECK(turns[2].r.past == 0);
  CHECK(turns[2].r.prompt.size() > turns[0].r.prompt.size());  // the system message
  CHECK(chat.messages().front().content == "Answer in French.");
  CHECK_THAT(notices, Catch::Contains("conversation cleared") && Catch::Contains("system message: Answer in French.") &&
                          Catch::Contains("unknown command /frobnicate"));
}

TEST_CASE("generate: a stop string split over two tokens stops there and is not shown", "[.tiny]") {
  std::unique_ptr<Model> model = open_tiny("model-cached.onnx");
  const Tokenizer& tok = *model->tokenizer();
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.tokenizer = &tok;
  const std::vector<int32_t> prompt = tok.encode("The capital of France is");
  const GenerateResult free_run = model->generator().run(prompt, o);
  // Pick two neighbouring tokens with text on both sides of their boundary.
  size_t k = 1;
  std::string left, right;
  for (; k + 1 < free_run.tokens.size(); ++k) {
    left = tok.decode({free_run.tokens.begin(), free_run.tokens.begin() + long(k)}, true);
    const std::string both = tok.decode({free_run.tokens.begin(), free_run.tokens.begin() + long(k) + 1}, true);
    right = both.substr(left.size());
    if (left.size() >= 2 && right.size() >= 2 && both.compare(0, left.size(), left) == 0) break;
  }
  REQUIRE(k + 1 < free_run.tokens.size());
  // The stop string: the last character of token k and the first of token k+1 (bytes: enough for ASCII
  // or whole UTF-8 characters, which decode() gives).
  const std::string stop = left.substr(left.size() - 1) + right.substr(0, 1);
  const size_t first_at = (left + right).find(stop);
  o.stop_strings = {stop};
  std::string streamed;
  o.on_text = [&](std::string_view s) { streamed += s; };
  const GenerateResult r = model->generator().run(prompt, o);
  CHECK(r.stop == StopReason::StopString);
  CHECK(r.stop_string == stop);
  CHECK(r.text == (left + right).substr(0, first_at));
  CHECK(streamed == r.text);
  CHECK(r.tokens.size() <= k + 1);
}

TEST_CASE("chat: the same seed gives the same tokens across thread counts on real logits", "[.tiny]") {
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_p = 0.95f;
  sp.seed = 2024;
  std::vector<std::vector<int32_t>> runs;
  for (int threads : {1, 2}) {
    std::unique_ptr<Model> model = open_tiny("model-cached.onnx", threads);
    for (int again = 0; again < 2; ++again) {
      Sampler s(sp);
      GenerateOptions o;
      o.max_new_tokens = 24;
      o.choose = [&s](const float* l, int64_t v, std::span<const int32_t> h) { return s.sample(l, v, h); };
      runs.push_back(model->generator().run(model->tokenizer()->encode("Once upon a time"), o).tokens);
    }
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
  CHECK(runs[0] == runs[3]);
}

TEST_CASE("generate on the tiny export: each KV state allocated once, at the last step's size", "[.tiny]") {
  // The reserves before the first step size the stores for the last step:
  // reserving the prompt first made each store twice (a 5-token prompt's
  // page holds 32 positions of this model, 40 new tokens need more), and
  // populated both, the first never written.
  for (int64_t steps : {1, 40}) {
    INFO(steps << " new tokens");
    const auto model = open_tiny("model-cached.onnx");
    REQUIRE(model->session().keeps_kv_state());
    GenerateOptions o;
    o.max_new_tokens = steps;
    const int64_t before = kv_state_allocations();
    const GenerateResult r = model->generator().run({9707, 11, 1879, 0, 358}, o);
    CHECK(r.tokens.size() == static_cast<size_t>(steps));
    CHECK(kv_state_allocations() - before == model->session().pass_report().get("kv_state"));
    CHECK(r.reserve_ms > 0);
    CHECK(r.prefill_ms >= r.reserve_ms);
  }
}

