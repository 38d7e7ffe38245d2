#include "cli/generation_flags.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "base/error.h"
#include "base/thread_pool.h"
#include "cli/process_stats.h"
#include "models/model.h"

namespace onebit::cli {

void GenerationFlags::add_to(CLI::App* cmd) {
  cmd->add_option("-n,--max-new-tokens", max_new, "Tokens to generate at most")->capture_default_str();
  const auto sampling_flag = [&](CLI::Option* o) { sampling_options_.push_back(o); };
  sampling_flag(cmd->add_option("--temperature", sampling.temperature,
                                "Sample at this temperature (0: the largest logit); any sampling flag turns sampling "
                                "on, greedy otherwise")
                    ->capture_default_str());
  sampling_flag(cmd->add_option("--top-k", sampling.top_k, "Sample among the k most likely tokens (0: off)")
                    ->capture_default_str());
  sampling_flag(cmd->add_option("--top-p", sampling.top_p,
                                "Sample among the most likely tokens whose probability adds up to p (1: off)")
                    ->capture_default_str());
  sampling_flag(cmd->add_option("--min-p", sampling.min_p,
                                "Sample among tokens at least min-p times as likely as the most likely (0: off)")
                    ->capture_default_str());
  sampling_flag(cmd->add_option("--repeat-penalty", sampling.repeat_penalty,
                                "Divide the logits of tokens seen in the window (multiply when negative) (1: off)")
                    ->capture_default_str());
  sampling_flag(cmd->add_option("--repeat-last-n", sampling.repeat_last_n,
                                "The repeat penalty's window: the last N tokens (-1: all, 0: off)")
                    ->capture_default_str());
  seed_option_ = cmd->add_option("--seed", sampling.seed,
                                 "Seed of the sampler's random numbers: the same seed gives the same tokens (default: "
                                 "drawn, and printed)");
  sampling_options_.push_back(seed_option_);
  cmd->add_flag("--sample", sample,
                "Sample with the model's own settings (generation_config.json, genai_config.json; transformers' "
                "defaults where they say nothing: temperature 1, top-k 50); the flags above override them");
  cmd->add_option("--stop", stop, "Stop when the text reaches STRING, which is not printed (repeatable)");
  cmd->add_option("--lookup", lookup,
                  "Exact lookup decoding: draft up to N tokens from the text so far where its last tokens occurred "
                  "before, verify them in one pass, keep those greedy would choose (the same tokens, faster on text "
                  "that repeats its input; greedy only; 0: off)")
      ->check(CLI::Range(int64_t{0}, int64_t{32}))
      ->capture_default_str();
  cmd->add_flag("--json", json, "Print one JSON object per generation (ids, text, stop reason, timings, peak RSS)");
}

std::optional<SamplingParams> GenerationFlags::sampling_for(const Model& model) const {
  bool given = false;
  for (const CLI::Option* o : sampling_options_) given |= o->count() > 0;
  if (!given && !sample) return std::nullopt;
  SamplingParams p = sampling;
  if (sample) {
    // transformers' GenerationConfig defaults, then the model's files, then the flags.
    const SamplingDefaults& d = model.files().sampling;
    SamplingParams m;
    m.temperature = static_cast<float>(d.temperature.value_or(1.0));
    m.top_k = static_cast<int32_t>(d.top_k.value_or(50));
    m.top_p = static_cast<float>(d.top_p.value_or(1.0));
    m.min_p = static_cast<float>(d.min_p.value_or(0.0));
    m.repeat_penalty = static_cast<float>(d.repetition_penalty.value_or(1.0));
    const auto given_flag = [&](const char* name) {
      for (const CLI::Option* o : sampling_options_)
        if (o->check_lname(name) && o->count() > 0) return true;
      return false;
    };
    if (!given_flag("temperature")) p.temperature = m.temperature;
    if (!given_flag("top-k")) p.top_k = m.top_k;
    if (!given_flag("top-p")) p.top_p = m.top_p;
    if (!given_flag("min-p")) p.min_p = m.min_p;
    if (!given_flag("repeat-penalty")) p.repeat_penalty = m.repeat_penalty;
  }
  if (seed_option_->count() == 0) p.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  p.validate();
  return p;
}

GenerateOptions GenerationFlags::options_for(const Model& model, std::unique_ptr<Sampler>& sampler) const {
  if (max_new < 1) fail("-n/--max-new-tokens must be at least 1, got {}", max_new);
  GenerateOptions g;
  g.max_new_tokens = max_new;
  g.max_context = model.max_positions();
  g.eos_ids = model.eos_ids();
  g.stop_strings = stop;
  if (!stop.empty() && !model.tokenizer()) fail("--stop needs a tokenizer to read the text; pass --tokenizer PATH");
  sampler.reset();
  g.lookup = lookup;
  if (const std::optional<SamplingParams> p = sampling_for(model)) {
    if (lookup > 0) fail("--lookup is exact greedy decoding; it cannot be combined with sampling (--temperature, --top-k, "
                         "--top-p, --min-p, --repeat-penalty, --seed, --sample)");
    sampler = std::make_unique<Sampler>(*p);
    Sampler* s = sampler.get();
    g.choose = [s](const float* logits, int64_t vocab, std::span<const int32_t> history) {
      return s->sample(logits, vocab, history);
    };
  }
  return g;
}

Json generation_record(Model& model, const GenerateResult& r, const Sampler* sampler) {
  const int64_t steps = r.decode_steps();
  Json sampling = nullptr;
  if (sampler) {
    const SamplingParams& p = sampler->params();
    sampling = {{"temperature", p.temperature}, {"top_k", p.top_k},
                {"top_p", p.top_p},             {"min_p", p.min_p},
                {"repeat_penalty", p.repeat_penalty}, {"repeat_last_n", p.repeat_last_n},
                {"seed", p.seed}};
  }
  const size_t n = r.tokens.size();
  return Json{{"model", model.path()},
              {"prompt_ids", r.prompt},
              {"past", r.past},
              {"prefill_tokens", r.prefill_tokens},
              {"generated_ids", r.tokens},
              {"text", r.text},
              {"stop_reason", stop_reason_name(r.stop)},
              {"stop_string", r.stop == StopReason::StopString ? Json(r.stop_string) : Json(nullptr)},
              {"sampling", sampling},
              {"timings",
               {{"load_s", model.load_seconds()},
                {"prefill_ms", r.prefill_ms},
                {"reserve_ms", r.reserve_ms},
                {"prefill_tok_s", r.prefill_ms > 0 ? r.prefill_tokens / (r.prefill_ms / 1000.0) : 0.0},
                {"decode_ms", r.decode_ms},
                {"decode_ms_per_token", steps > 0 ? r.decode_ms / steps : 0.0},
                {"decode_tok_s", r.decode_ms > 0 && steps > 0 ? steps / (r.decode_ms / 1000.0) : 0.0},
                {"choose_ms_per_token", n > 0 ? r.choose_ms / static_cast<double>(n) : 0.0}}},
              {"passes", r.passes},
              {"lookup", {{"drafted", r.drafted}, {"accepted", r.accepted}}},
              {"threads", model.session().pool().size()},
              {"cache", model.binding().cache == CausalLmBinding::Cache::None ? "none" : "kv"},
              {"kv_state", model.session().keeps_kv_state()},  // the cache kept in the session
              {"kv_dtype", dtype_name(model.session().options().kernel.kv_dtype)},
              {"peak_rss_mib", peak_rss_mib()}};
}

std::unique_ptr<Model> open_model(const std::string& path, const ModelOptions& options) {
  Progress p(fmt::format("loading {}", path));
  return Model::open(path, options);
}

struct Progress::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread thread;
};

Progress::Progress(std::string what, double delay_s) {
  if (::isatty(2) == 0) return;
  state_ = std::make_shared<State>();
  state_->thread = std::thread([s = state_, what = std::move(what), delay_s] {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(s->m);
    if (s->cv.wait_for(lock, std::chrono::duration<double>(delay_s), [&] { return s->done; })) return;
    do {
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      fmt::print(stderr, "\r{} {:.1f} s\x1b[K", what, sec);
      std::fflush(stderr);
    } while (!s->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return s->done; }));
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
  });
}

void Progress::done() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->m);
    state_->done = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
  state_.reset();
}

}  // namespace onebit::cli
