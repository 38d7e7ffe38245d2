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

}  // namespace onebit
