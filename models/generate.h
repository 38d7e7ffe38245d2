// Greedy decoding over a bound causal LM. Without a cache the whole sequence
// is re-run every step (the default export); with one, the prompt runs once
// and each step feeds the last token with `present` back as `past`.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/session.h"
#include "models/causal_lm.h"

namespace onebit {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  std::vector<int64_t> eos_ids;  // stop after choosing one of these
  int64_t max_context = 0;       // positions the model supports; 0 = unknown
  bool keep_logits = false;      // keep each step's logits (for --dump-logits)
};

struct GenerateResult {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;  // chosen ids, one per step (an EOS that stopped it included)
  std::vector<float> logits;    // [steps, vocab] when keep_logits
  int64_t vocab = 0;
  double prefill_ms = 0;        // the first step
  double decode_ms = 0;         // every later step
  bool stopped_at_eos = false;
  bool stopped_at_context = false;
  int64_t decode_steps() const { return static_cast<int64_t>(tokens.size()) - 1; }
};

class Generator {
 public:
  Generator(Session& session, CausalLmBinding binding);

  // Runs greedy decoding from `prompt`; `on_token` sees each chosen id as soon
  // as it is chosen (streaming). Throws Error for a prompt that does not fit
  // the context.
  GenerateResult run(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                     const std::function<void(int32_t)>& on_token = {});

  const CausalLmBinding& binding() const { return binding_; }

  // Shape-only inputs of one pass of `seq` new tokens after `past_len`
  // cached ones (for Session::reserve and Session::value_shapes).
  std::vector<NamedTensor> shapes_for(int64_t seq, int64_t past_len) { return inputs_for(nullptr, seq, past_len, false); }

 private:
  // Inputs for one pass of `seq` new tokens after `past_len` cached ones;
  // with `data` false they carry shapes only (for Session::reserve).
  std::vector<NamedTensor> inputs_for(const std::vector<int32_t>* ids, int64_t seq, int64_t past_len, bool data);
  // One forward pass over `ids` at positions [past_len, past_len + ids.size());
  // returns the logits of the last position. Updates the cache when there is one.
  const float* forward(const std::vector<int32_t>& ids, int64_t past_len);

  Session& session_;
  CausalLmBinding binding_;
  std::vector<int> logits_index_, present_index_;
  int logits_slot_ = -1;
  std::vector<Tensor> cache_;  // current past tensors, in binding order
  bool kv_state_ = false;      // the session keeps the cache (Session::keeps_kv_state)
  std::vector<Tensor> outputs_;
  int64_t vocab_ = 0;
};

// Index of the largest value; the first one on ties (as torch.argmax).
int32_t argmax(const float* v, int64_t n);

}  // namespace onebit
