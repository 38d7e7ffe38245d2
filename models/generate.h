// Decoding over a bound causal LM: greedy by default (the parity mode), or
// any chooser of the next token (models/sampler.h). Without a cache the
// whole sequence is re-run every step (the default export); with one, each
// pass runs only the tokens the cache does not hold yet: the prompt once,
// then the last chosen token each step.
//
// The generator follows one sequence. run() starts it anew; extend() appends
// tokens after everything so far and generates again, so a chat keeps its
// KV cache across turns and prefills only the new turn. The cache holds
// every token of the sequence but the last one chosen, which no pass has
// run yet: extend() runs it first, and drop_last() can still take it back
// (an end-of-turn token the chat template writes itself).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/session.h"
#include "models/causal_lm.h"

namespace onebit {

class Tokenizer;

// Why a generation ended.
enum class StopReason {
  MaxTokens,    // -n tokens generated
  Eos,          // an end-of-sequence id was chosen (it is the last token)
  StopString,   // the text reached a stop string
  Context,      // the sequence fills the model's context
  Interrupted,  // GenerateOptions::interrupt was set (Ctrl-C)
};
// "max_tokens", "eos", "stop_string", "context_full", "interrupted"
const char* stop_reason_name(StopReason r);

// The next token from the last position's logits [vocab] and every token of
// the sequence so far.
using TokenChooser = std::function<int32_t(const float* logits, int64_t vocab, std::span<const int32_t> history)>;

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> eos_ids;  // stop after choosing one of these
  int64_t max_context = 0;       // positions the model supports; 0 = unknown
  bool keep_logits = false;      // keep each step's logits (for --dump-logits)
  TokenChooser choose;           // empty: argmax (greedy)
  // With a tokenizer the chosen ids are decoded as they come (special tokens
  // skipped), `on_text` is given each piece of text once it is final, and
  // the text is checked for the stop strings: the first one found ends the
  // generation, and neither it nor anything after it is shown.
  const Tokenizer* tokenizer = nullptr;
  std::vector<std::string> stop_strings;
  std::function<void(std::string_view)> on_text;
  // Checked before every pass: once set, the generation ends (Interrupted).
  const std::atomic<bool>* interrupt = nullptr;
  // Exact lookup decoding (models/lookup.h): each pass (the prefill too)
  // also runs up to `lookup` tokens drafted from the sequence so far and
  // keeps those greedy decoding chooses itself. Greedy only (`choose` must
  // be empty); 0: off.
  int64_t lookup = 0;
};

struct GenerateResult {
  std::vector<int32_t> prompt;  // the tokens this call appended (run: the prompt)
  std::vector<int32_t> tokens;  // chosen ids, one per step (an EOS that stopped it included)
  std::string text;             // with a tokenizer: the text shown (cut before a stop string)
  std::vector<float> logits;    // [steps, vocab] when keep_logits
  int64_t vocab = 0;
  int64_t past = 0;             // positions the cache held when this call began
  int64_t prefill_tokens = 0;   // tokens the first pass ran
  double prefill_ms = 0;        // the first step, with reserve_ms: the time to the first token
  double reserve_ms = 0;        // sizing the arena, output buffers and KV state for every step, before the first
  double decode_ms = 0;         // every later step
  double choose_ms = 0;         // choosing tokens (argmax or sampler), every step; in the two above
  int64_t passes = 0;            // forward passes (one per token without lookup)
  int64_t drafted = 0;           // lookup: drafted tokens run
  int64_t accepted = 0;          // lookup: drafted tokens kept
  StopReason stop = StopReason::MaxTokens;
  std::string stop_string;      // the one that ended it (StopString)
  int64_t decode_steps() const { return static_cast<int64_t>(tokens.size()) - 1; }
};

class Generator {
 public:
  Generator(Session& session, CausalLmBinding binding);

  // Starts a new sequence from `prompt` and generates; `on_token` sees each
  // chosen id as soon as it is chosen (streaming). Throws Error for a prompt
  // that does not fit the context.
  GenerateResult run(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                     const std::function<void(int32_t)>& on_token = {});
  // Appends `tokens` after the current sequence and generates; only the
  // tokens the cache lacks are prefilled (all of them without a cache).
  // Throws, changing nothing, when the sequence would not fit the context.
  GenerateResult extend(const std::vector<int32_t>& tokens, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token = {});
  // Forgets the last token of the sequence; an Error when the cache holds it.
  void drop_last();
  // Forgets the sequence (the next pass starts an empty cache).
  void reset();

  // Every token so far: prompts, appended tokens and chosen ones.
  const std::vector<int32_t>& sequence() const { return sequence_; }
  // Positions the KV cache holds (0 without a cache).
  int64_t cached_positions() const { return cached() ? fed_ : 0; }
  bool cached() const { return binding_.cache != CausalLmBinding::Cache::None; }

  const CausalLmBinding& binding() const { return binding_; }

  // Shape-only inputs of one pass of `seq` new tokens after `past_len`
  // cached ones (for Session::reserve and Session::value_shapes).
  std::vector<NamedTensor> shapes_for(int64_t seq, int64_t past_len) { return inputs_for(nullptr, seq, past_len, false); }

 private:
  // Inputs for one pass of `seq` new tokens after `past_len` cached ones,
  // reading the logits of the last `rows`; with `data` false they carry
  // shapes only (for Session::reserve).
  std::vector<NamedTensor> inputs_for(const int32_t* ids, int64_t seq, int64_t past_len, bool data, int64_t rows = 1);
  // One forward pass over `ids` at positions [past_len, past_len + ids.size());
  // returns the logits of the last `rows` positions, [rows][vocab]. Updates
  // the cache when there is one; a cache holding more than `past_len`
  // positions (rejected drafts) is cut back first.
  const float* forward(std::span<const int32_t> ids, int64_t past_len, int64_t rows = 1);
  GenerateResult generate(GenerateResult r, const GenerateOptions& options, const std::function<void(int32_t)>& on_token);

  Session& session_;
  CausalLmBinding binding_;
  std::vector<int> logits_index_, present_index_;
  int logits_slot_ = -1;
  std::vector<Tensor> cache_;  // current past tensors, in binding order
  bool kv_state_ = false;      // the session keeps the cache (Session::keeps_kv_state)
  bool rows_input_ = false;    // the pass added kLastRowsInput (SessionOptions::last_rows_input)
  std::vector<Tensor> outputs_;
  std::vector<float> wide_logits_;  // float16 / bfloat16 logits rows, widened
  int64_t vocab_ = 0;
  std::vector<int32_t> sequence_;
  int64_t fed_ = 0;            // leading tokens of sequence_ the cache holds
};

// Index of the largest value; the first one on ties (as torch.argmax); a NaN
// is never chosen unless v[0] is one (quant/ukernels/f32_vargmax_ukernels.h).
int32_t argmax(const float* v, int64_t n);

}  // namespace onebit
