// The generation flags `ort-run` and `chat` share: -n, sampling
// (--temperature, --top-k, --top-p, --min-p, --repeat-penalty,
// --repeat-last-n, --seed, --sample), --stop, --lookup and --json; and the one JSON
// record a generation prints with --json.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "models/generate.h"
#include "models/sampler.h"

namespace onebit {
class Model;
struct ModelOptions;
}

namespace onebit::cli {

struct GenerationFlags {
  int64_t max_new = 32;
  SamplingParams sampling;  // the flags' values over 1bit's defaults (every filter off)
  bool sample = false;      // --sample: the model's generation_config over transformers' defaults
  std::vector<std::string> stop;
  bool json = false;
  int64_t lookup = 0;       // --lookup N: exact lookup decoding with drafts of up to N tokens

  void add_to(CLI::App* cmd);
  // Greedy (nullopt) unless a sampling flag or --sample was given. Without
  // --seed the seed is drawn from the system and reported.
  std::optional<SamplingParams> sampling_for(const Model& model) const;
  // The generate options of one run: -n, EOS ids, context, stop strings,
  // and the sampler (kept in `sampler`, which must outlive the options).
  GenerateOptions options_for(const Model& model, std::unique_ptr<Sampler>& sampler) const;

 private:
  std::vector<CLI::Option*> sampling_options_;
  CLI::Option* seed_option_ = nullptr;
};

// One --json record of a generation: prompt and generated ids, text, stop
// reason, timings (load, prefill, decode per token, choosing per token),
// peak RSS, threads, and the sampling settings (null: greedy).
Json generation_record(Model& model, const GenerateResult& r, const Sampler* sampler);

// Model::open with a progress line while it loads.
std::unique_ptr<Model> open_model(const std::string& path, const ModelOptions& options);

// A line on stderr while something slow runs: shown after `delay_s`, with
// the seconds so far, only when stderr is a terminal; erased when done.
class Progress {
 public:
  explicit Progress(std::string what, double delay_s = 1.0);
  ~Progress() { done(); }
  void done();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace onebit::cli
