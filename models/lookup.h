// Drafts for exact lookup decoding (`--lookup N`, no draft model): text
// that repeats its input — code being edited, a summary quoting its source,
// a list continued — has its next tokens earlier in the sequence. The
// generator runs the last chosen token and the draft in one pass, keeps the
// longest prefix of the draft that greedy decoding chooses itself, and the
// token greedy chooses after it; the cache takes the rest back. Every kernel
// computes a row the same way whatever the number of rows in the pass
// (tests/test_row_invariance.cpp), so the output is token for token the
// greedy output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace onebit {

// The longest n-gram lookup_draft matches, and the shortest: one token
// recurring says too little to be worth verifying.
inline constexpr int64_t kLookupMaxNgram = 4, kLookupMinNgram = 2;

// Up to `max_tokens` tokens that followed the most recent earlier occurrence
// of the sequence's last n tokens, the longest n from kLookupMaxNgram down to
// kLookupMinNgram that occurs; empty when none recurs (or max_tokens <= 0).
// O(size · n) per call.
std::vector<int32_t> lookup_draft(std::span<const int32_t> seq, int64_t max_tokens);

// How long the next draft may be. A refused draft is not free: each drafted
// row costs a share of a step (on the 4-bit default model at two threads a
// pass of 1 + 4 rows takes ~1.5 decode steps), so text that does not repeat
// would get slower. The cap starts at one token, doubles after a draft kept
// whole (up to `max_tokens`) and halves after one refused from its first
// token, never below one.
class LookupBudget {
 public:
  explicit LookupBudget(int64_t max_tokens) : max_(max_tokens), cap_(std::min<int64_t>(1, max_tokens)) {}
  int64_t cap() const { return cap_; }
  void update(int64_t drafted, int64_t kept) {
    if (drafted == 0) return;
    if (kept == 0) cap_ = std::max<int64_t>(1, cap_ / 2);
    else if (kept == drafted) cap_ = std::min(max_, cap_ * 2);
  }

 private:
  int64_t max_, cap_;
};

}  // namespace onebit
