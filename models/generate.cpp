#include "models/generate.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "models/lookup.h"
#include "models/stop_strings.h"
#include "models/tokenizer/tokenizer.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int index_of(const std::vector<std::string>& names, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

// An integer tensor [1, n] of `dtype` (int64 or int32) filled by `value(i)`.
template <class F>
Tensor int_row(DType dtype, int64_t n, F value) {
  Tensor t = Tensor::allocate_uninit(dtype, {1, n});
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::I32) t.data<int32_t>()[i] = static_cast<int32_t>(value(i));
    else t.data<int64_t>()[i] = value(i);
  }
  return t;
}

// The first `n` positions of a cache tensor whose positions are axis
// rank − 2 ([.., P, head_dim]): a copy, since the positions of each head are
// a run of P · head_dim elements and only the first n of them stay.
Tensor first_positions(const Tensor& t, int64_t n) {
  const int axis = t.rank() - 2;
  const int64_t p = t.dim(axis), inner = t.dim(axis + 1);
  Shape shape = t.shape();
  shape[static_cast<size_t>(axis)] = n;
  Tensor out = Tensor::allocate_uninit(t.dtype(), shape);
  const int64_t outer = p > 0 ? t.size() / (p * inner) : 0;
  const size_t row = dtype_bytes(t.dtype(), static_cast<size_t>(n * inner));
  const size_t src_row = dtype_bytes(t.dtype(), static_cast<size_t>(p * inner));
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char*>(out.raw()) + o * row, static_cast<const char*>(t.raw()) + o * src_row, row);
  return out;
}

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::Eos: return "eos";
    case StopReason::StopString: return "stop_string";
    case StopReason::Context: return "context_full";
    case StopReason::Interrupted: return "interrupted";
  }
  return "?";
}

int32_t argmax(const float* v, int64_t n) {
  if (n <= 0) return 0;
  return static_cast<int32_t>(vec_math_config().argmax(static_cast<size_t>(n), v));
}

Generator::Generator(Session& session, CausalLmBinding binding) : session_(session), binding_(std::move(binding)) {
  const auto outs = session_.output_names();
  logits_slot_ = index_of(outs, binding_.logits);
  for (const auto& name : binding_.present_outputs) present_index_.push_back(index_of(outs, name));
  // A session that keeps the cache itself (the kv-state pass) has no
  // `present` outputs; `past` then only tells it the past length.
  kv_state_ = session_.keeps_kv_state();
  rows_input_ = session_.pass_report().get("last_rows") > 0;
  const auto missing = std::count(present_index_.begin(), present_index_.end(), -1);
  if (kv_state_ ? missing != static_cast<long>(present_index_.size()) : missing > 0)
    fail("{}: the session {} the KV cache but has {} of its {} present outputs", session_.graph().path,
         kv_state_ ? "keeps" : "does not keep", present_index_.size() - static_cast<size_t>(missing),
         present_index_.size());
}

std::vector<NamedTensor> Generator::inputs_for(const int32_t* ids, int64_t seq, int64_t past_len, bool data,
                                               int64_t rows) {
  auto row = [&](DType dtype, int64_t n, auto value) {
    if (!data) return Tensor(dtype, {1, n}, nullptr);
    return int_row(dtype, n, value);
  };
  std::vector<NamedTensor> inputs;
  inputs.push_back({binding_.input_ids, row(binding_.ids_dtype, seq, [&](int64_t i) { return int64_t{ids[i]}; })});
  if (!binding_.attention_mask.empty())
    inputs.push_back({binding_.attention_mask, row(binding_.mask_dtype, past_len + seq, [](int64_t) { return int64_t{1}; })});
  if (!binding_.position_ids.empty())
    inputs.push_back({binding_.position_ids, row(binding_.positions_dtype, seq, [&](int64_t i) { return past_len + i; })});
  if (rows_input_) inputs.push_back({kLastRowsInput, Tensor(DType::I64, {rows}, nullptr)});
  if (binding_.cache != CausalLmBinding::Cache::None) {
    for (size_t i = 0; i < binding_.past_inputs.size(); ++i) {
      if (data && past_len > 0 && !kv_state_) {
        inputs.push_back({binding_.past_inputs[i], cache_[i]});
        continue;
      }
      Shape s = binding_.cache == CausalLmBinding::Cache::Stacked
                    ? Shape{2 * binding_.layers, 1, binding_.kv_heads, past_len, binding_.head_dim}
                    : Shape{1, binding_.kv_heads, past_len, binding_.head_dim};
      // An empty cache (the first step) needs no storage; a shape-only one has none.
      inputs.push_back({binding_.past_inputs[i], Tensor(binding_.cache_dtype, s, nullptr)});
    }
  }
  return inputs;
}

const float* Generator::forward(std::span<const int32_t> ids, int64_t past_len, int64_t rows) {
  const int64_t seq = static_cast<int64_t>(ids.size());
  if (!kv_state_ && past_len > 0 && !cache_.empty() && cache_[0].dim(cache_[0].rank() - 2) > past_len)
    for (Tensor& t : cache_) t = first_positions(t, past_len);
  std::vector<NamedTensor> inputs = inputs_for(ids.data(), seq, past_len, true, rows);
  outputs_.clear();  // release last step's buffers so the session can recycle them
  outputs_ = session_.run(inputs);
  inputs.clear();
  if (binding_.cache != CausalLmBinding::Cache::None && !kv_state_) {
    cache_.resize(present_index_.size());
    for (size_t i = 0; i < present_index_.size(); ++i) cache_[i] = outputs_[static_cast<size_t>(present_index_[i])];
  }

  const Tensor& logits = outputs_[static_cast<size_t>(logits_slot_)];
  // [1, seq, vocab], or [1, rows, vocab] when the session keeps only the
  // last positions (SessionOptions::last_position_outputs).
  const int64_t kept = rows_input_ ? rows : 1;
  if (logits.rank() != 3 || logits.dim(0) != 1 || (logits.dim(1) != seq && logits.dim(1) != kept))
    fail("{}: logits have shape {}, expected [1, {}, vocab]", session_.graph().path, shape_str(logits.shape()), seq);
  if (logits.dim(1) < rows)
    fail("{}: a pass needs the logits of its last {} positions but the session keeps {} (lookup decoding needs "
         "SessionOptions::last_rows_input)",
         session_.graph().path, rows, logits.dim(1));
  vocab_ = logits.dim(2);
  const int64_t first = (logits.dim(1) - rows) * vocab_;
  if (logits.dtype() == DType::F32) return logits.data<float>() + first;
  // A float16 model's logits: the kept rows widened (exactly) to float32.
  if (logits.dtype() != DType::F16 && logits.dtype() != DType::BF16)
    fail("{}: logits are {}, expected float32, float16 or bfloat16", session_.graph().path, dtype_name(logits.dtype()));
  wide_logits_.resize(static_cast<size_t>(rows * vocab_));
  const uint16_t* bits = logits.data<uint16_t>() + first;
  if (logits.dtype() == DType::F16) {
    // The vectorised widen (bit for bit half_to_float): element by element
    // it took ~0.1 ms of a SmolLM2 step (49152 logits).
    vec_math_config().widen(wide_logits_.size(), bits, wide_logits_.data());
  } else {
    for (size_t i = 0; i < wide_logits_.size(); ++i) wide_logits_[i] = bfloat16_to_float(bits[i]);
  }
  return wide_logits_.data();
}

void Generator::reset() {
  sequence_.clear();
  fed_ = 0;
  cache_.clear();
  outputs_.clear();
}

void Generator::drop_last() {
  if (sequence_.empty()) fail("drop_last: the sequence is empty");
  if (cached() && fed_ >= static_cast<int64_t>(sequence_.size()))
    fail("drop_last: the KV cache already holds the last token ({} positions)", fed_);
  sequence_.pop_back();
}

GenerateResult Generator::run(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty (0 tokens)");
  const int64_t ctx = options.max_context;
  if (ctx > 0 && static_cast<int64_t>(prompt.size()) >= ctx)
    fail("the prompt is {} tokens; the model's context is {} positions", prompt.size(), ctx);
  reset();
  return extend(prompt, options, on_token);
}

GenerateResult Generator::extend(const std::vector<int32_t>& tokens, const GenerateOptions& options,
                                 const std::function<void(int32_t)>& on_token) {
  if (options.max_new_tokens < 1) fail("the number of new tokens must be at least 1, got {}", options.max_new_tokens);
  const int64_t so_far = static_cast<int64_t>(sequence_.size());
  const int64_t total = so_far + static_cast<int64_t>(tokens.size());
  if (total == 0) fail("the prompt is empty (0 tokens)");
  if (total == cached_positions()) fail("nothing to run: no new tokens, and the KV cache holds all {}", total);
  const int64_t ctx = options.max_context;
  if (ctx > 0 && total >= ctx)
    fail("the sequence would be {} tokens ({} so far and {} new); the model's context is {} positions", total, so_far,
         tokens.size(), ctx);
  for (int32_t id : tokens)
    if (id < 0 || (vocab_ > 0 && id >= vocab_))
      fail("token id {} is outside the model's vocabulary of {} ids", id, vocab_);
  GenerateResult r;
  r.prompt = tokens;
  r.past = cached_positions();
  sequence_.insert(sequence_.end(), tokens.begin(), tokens.end());
  return generate(std::move(r), options, on_token);
}

GenerateResult Generator::generate(GenerateResult r, const GenerateOptions& options,
                                   const std::function<void(int32_t)>& on_token) {
  const int64_t ctx = options.max_context;
  const bool kv = cached();
  if (options.lookup < 0) fail("--lookup must be 0 (off) or more drafted tokens, got {}", options.lookup);
  if (options.lookup > 0 && options.choose) fail("lookup decoding is exact greedy decoding: it cannot sample");
  // Said before the first token rather than at the first draft.
  if (options.lookup > 0 && !rows_input_ && session_.pass_report().get("last_position") > 0)
    fail("{}: lookup decoding reads the logits of every drafted position, but the session keeps only the last row "
         "(SessionOptions::last_rows_input is off, or the graph names a value {} itself)",
         session_.graph().path, kLastRowsInput);
  const auto size = [&] { return static_cast<int64_t>(sequence_.size()); };
  // Size the arena and output buffers once, for the prefill and for the
  // last step (the largest cache), so the decode steps allocate nothing.
  // Largest first: a KV state kept in the session is then allocated and
  // its pages populated once, at its final size, where reserving the
  // prompt first populated a prompt-sized one only to replace it (0.25–0.3
  // s of a 1024-token prompt's time to first token, docs/BENCHMARK.md
  // "Reserving the KV state once").
  const auto reserving = Clock::now();
  const int64_t past0 = cached_positions();
  int64_t last = size() + options.max_new_tokens - 1;
  if (ctx > 0) last = std::min(last, ctx - 1);
  if (const int64_t n = std::min(1 + options.lookup, ctx > 0 ? ctx - last : INT64_MAX);
      options.lookup > 0 && last > size() && n > 1) {
    session_.reserve(kv ? inputs_for(nullptr, n, last, false, n) : inputs_for(nullptr, last + n - 1, 0, false, n));
  }
  if (last > size()) session_.reserve(kv ? inputs_for(nullptr, 1, last, false) : inputs_for(nullptr, last, 0, false));
  session_.reserve(kv ? inputs_for(nullptr, size() - past0, past0, false) : inputs_for(nullptr, size(), 0, false));
  r.reserve_ms = ms_since(reserving);
  r.prefill_ms = r.reserve_ms;

  std::unique_ptr<StreamDecoder> decoder;
  StopStrings stops(options.stop_strings);
  if (options.tokenizer) decoder = std::make_unique<StreamDecoder>(*options.tokenizer, /*skip_special=*/true);
  else if (!stops.empty()) fail("stop strings need a tokenizer to decode the text");
  const auto show = [&](const std::string& text) {
    if (text.empty()) return;
    r.text += text;
    if (options.on_text) options.on_text(text);
  };
  // Appends a chosen token; false when the generation ends with it.
  const auto take = [&](int32_t next, const float* logits) {
    if (options.keep_logits) r.logits.insert(r.logits.end(), logits, logits + vocab_);
    r.vocab = vocab_;
    sequence_.push_back(next);
    r.tokens.push_back(next);
    if (on_token) on_token(next);
    if (decoder) show(stops.push(decoder->push(next)));
    if (std::find(options.eos_ids.begin(), options.eos_ids.end(), next) != options.eos_ids.end()) {
      r.stop = StopReason::Eos;
      return false;
    }
    if (stops.stopped()) {
      r.stop = StopReason::StopString;
      r.stop_string = stops.matched();
      return false;
    }
    if (static_cast<int64_t>(r.tokens.size()) == options.max_new_tokens) return false;
    if (ctx > 0 && size() >= ctx) {
      r.stop = StopReason::Context;
      return false;
    }
    return true;
  };

  LookupBudget budget(options.lookup);
  for (bool going = true; going; ++r.passes) {
    if (options.interrupt && options.interrupt->load(std::memory_order_relaxed)) {
      r.stop = StopReason::Interrupted;
      break;
    }
    const auto t0 = Clock::now();
    const bool first = r.passes == 0;
    const int64_t past = cached_positions();
    // A draft may take every token still allowed but the one the pass
    // chooses after it, and every position left in the context.
    std::vector<int32_t> draft;
    if (options.lookup > 0) {
      int64_t room = std::min(budget.cap(), options.max_new_tokens - static_cast<int64_t>(r.tokens.size()) - 1);
      if (ctx > 0) room = std::min(room, ctx - size());
      draft = lookup_draft(sequence_, room);
    }
    std::vector<int32_t> ids(sequence_.begin() + past, sequence_.end());
    ids.insert(ids.end(), draft.begin(), draft.end());
    const int64_t rows = 1 + static_cast<int64_t>(draft.size());
    const float* logits = forward(ids, past, rows);
    if (first) {
      r.prefill_tokens = size() - past;
      if (options.tokenizer && static_cast<int64_t>(options.tokenizer->vocab_size()) > vocab_)
        fail("{}: the tokenizer has {} ids but the model's logits have {}: the tokenizer is not this model's",
             session_.graph().path, options.tokenizer->vocab_size(), vocab_);
    }
    if (kv) fed_ = size();
    r.drafted += static_cast<int64_t>(draft.size());
    const int64_t kept_before = r.accepted;
    // Row j holds the logits after draft[j - 1]: its choice is greedy's as
    // long as every draft token before it was greedy's choice too.
    for (int64_t j = 0; j < rows; ++j) {
      const float* row = logits + j * vocab_;
      const auto t1 = Clock::now();
      const int32_t next = options.choose ? options.choose(row, vocab_, sequence_) : argmax(row, vocab_);
      r.choose_ms += ms_since(t1);
      going = take(next, row);
      if (!going || j + 1 == rows || next != draft[static_cast<size_t>(j)]) break;
      ++r.accepted;
      if (kv) fed_ = size();  // the pass ran it as draft[j]
    }
    budget.update(static_cast<int64_t>(draft.size()), r.accepted - kept_before);
    (first ? r.prefill_ms : r.decode_ms) += ms_since(t0);
  }
  if (decoder) {
    show(stops.push(decoder->flush()));
    show(stops.flush());
  }
  outputs_.clear();
  return r;
}

}  // namespace onebit
