// Sampling the next token from the last position's logits, for `--temperature`
// / `--top-k` / `--top-p` / `--min-p` / `--repeat-penalty` / `--seed`. Greedy
// decoding (the parity mode, the default) does not come here: the generator
// takes the plain argmax when no sampler is given.
//
// One step, in the order transformers applies its logits processors and
// warpers (generation/utils.py, _get_logits_processor: repetition penalty,
// then Temperature, TopK, TopP, MinP; onnxruntime-genai also applies the
// temperature before top-k/top-p):
//
//   1. repeat penalty over the last `repeat_last_n` tokens of the history,
//      each distinct token once: l < 0 ? l·penalty : l/penalty
//      (RepetitionPenaltyLogitsProcessor; llama.cpp's penalty_last_n window);
//   2. temperature: p ∝ exp((l - l_max) / T); T = 0 takes the largest
//      penalised logit (llama.cpp's convention; the step's draw is unused);
//   3. top-k: the k largest logits, exactly k (ties by lower id; transformers
//      keeps every token tied with the k-th, llama.cpp exactly k);
//   4. top-p: the smallest set, in decreasing probability (ties by lower id),
//      whose mass reaches p: a token stays when the mass before it is below p
//      (TopPLogitsWarper, llama.cpp top_p alike);
//   5. min-p: tokens with p >= min_p · p_max (MinPLogitsWarper, after the
//      temperature as there; llama.cpp applies its temperature last);
//   6. draw: u in [0, 1) from the generator below; the kept tokens are walked
//      in increasing id, their probabilities renormalised over the kept set,
//      and the first whose cumulative probability exceeds u is chosen (the
//      last kept one if rounding leaves none).
//
// At least one token always survives (min_tokens_to_keep = 1).
//
// The random numbers are specified here, not left to <random>'s
// implementation-defined distributions: xoshiro256** (Blackman and Vigna,
// https://prng.di.unimi.it/xoshiro256starstar.c) seeded by four outputs of
// splitmix64(seed) (https://prng.di.unimi.it/splitmix64.c), u = (next() >> 11)
// · 2^-53. Each step draws exactly one u, whatever the settings. The
// exponentials are the project's own (quant/ukernels/f32_vexp_ukernels.h, the
// same bits on every ISA), so a seed gives the same tokens on every machine
// that computes the same logits.
//
// Cost per step: with top-k, one pass over the logits with a k-entry heap,
// and the vocabulary is not copied; without, one copy of it (the weights by
// id), and then only the tokens above a weight threshold (min-p's, or for
// top-p one low enough that they hold the mass p) become candidates to sort.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace onebit {

struct SamplingParams {
  float temperature = 1.0f;     // 0: the largest (penalised) logit
  int32_t top_k = 0;            // 0: off
  float top_p = 1.0f;           // 1: off
  float min_p = 0.0f;           // 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;   // window over the history; 0: off, -1: the whole history
  uint64_t seed = 0;

  // Errors name the setting and its valid range ("--top-p 1.5: must be in (0, 1]").
  void validate() const;
  // "temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1 over 64, seed 7"
  std::string describe() const;
};

// xoshiro256** seeded through splitmix64, as specified above.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  double next_double() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);  // validates

  // The next token of `history` (prompt and chosen tokens) from the last
  // position's logits [vocab], with the next random draw.
  int32_t sample(const float* logits, int64_t vocab, std::span<const int32_t> history) {
    return choose(logits, vocab, history, rng_.next_double());
  }
  // The same with the draw given: the deterministic part, which the tests
  // hold against a reference on fixed draws.
  int32_t choose(const float* logits, int64_t vocab, std::span<const int32_t> history, double u);

  struct Candidate {
    int32_t id;
    float logit;   // after the repeat penalty
    float weight;  // exp((logit - max) / T), unnormalised
  };
  // The tokens the last choose() kept, in increasing id (after a T = 0 step:
  // the one chosen, weight 1); empty when it kept every token, whose weights
  // are then weights().
  std::span<const Candidate> kept() const { return {cand_.data(), kept_}; }
  // The last step's weights by id when it kept every token (no filter on).
  std::span<const float> weights() const { return all_ ? std::span<const float>(scratch_) : std::span<const float>(); }
  const SamplingParams& params() const { return params_; }

 private:
  // The penalised logits of the distinct tokens of the window, by id.
  void penalise(const float* logits, int64_t vocab, std::span<const int32_t> history);
  // Fills cand_ with the k largest penalised logits (a heap, one pass).
  void top_k(const float* logits, int64_t vocab, int64_t k);
  // Keeps, in place and in order, the top-p set of cand_[0, m): the shortest
  // prefix in decreasing logit whose mass reaches `target`; returns its size.
  size_t top_p_filter(size_t m, double target);

  SamplingParams params_;
  Xoshiro256 rng_;
  std::vector<Candidate> cand_;   // [top_k], or the tokens above a weight threshold
  std::vector<float> scratch_;    // weights: [vocab] by id without top-k, else [top_k]
  std::vector<double> blocks_;    // sums of scratch_ over blocks of 256 ids
  std::vector<Candidate> sel_;       // top_p_filter's working copy
  std::vector<double> bucket_mass_;  // top_p_filter's histogram
  bool all_ = false;              // the last step kept every token
  std::vector<std::pair<int32_t, float>> penalised_;  // (id, penalised logit), by id
  size_t kept_ = 0;
};

}  // namespace onebit
