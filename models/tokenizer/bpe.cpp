#include "models/tokenizer/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "base/error.h"
#include "models/tokenizer/utf8.h"

namespace onebit {

namespace {

// A vocabulary whose ids leave most of [0, max id] empty is refused rather
// than given a huge id -> token table.
constexpr size_t kMaxIdSlack = 1 << 20;

}  // namespace

Bpe::Bpe(BpeConfig config)
    : prefix_(std::move(config.continuing_subword_prefix)),
      suffix_(std::move(config.end_of_word_suffix)),
      fuse_unk_(config.fuse_unk),
      byte_fallback_(config.byte_fallback),
      ignore_merges_(config.ignore_merges) {
  int64_t max_id = -1;
  for (const auto& [token, id] : config.vocab) {
    if (id < 0) fail("model.vocab: token '{}' has negative id {}", token, id);
    max_id = std::max<int64_t>(max_id, id);
  }
  size_ = config.vocab.size();
  if (max_id >= 0 && size_t(max_id) > 2 * size_ + kMaxIdSlack) {
    fail("model.vocab: ids are too sparse ({} tokens, largest id {})", size_, max_id);
  }
  tokens_.resize(size_t(max_id + 1));
  present_.assign(size_t(max_id + 1), 0);
  for (auto& [token, id] : config.vocab) {
    if (present_[id] && tokens_[id] == token) fail("model.vocab: token '{}' is listed twice", token);
    if (present_[id]) fail("model.vocab: id {} is given to both '{}' and '{}'", id, tokens_[id], token);
    tokens_[id] = std::move(token);
    present_[id] = 1;
  }
  if (const int32_t dup = index_.build(tokens_, present_); dup >= 0) {
    fail("model.vocab: token '{}' is listed twice", tokens_[dup]);
  }
  bmp_char_ids_.assign(0x10000, -1);
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const std::string& token = tokens_[id];
    if (!present_[id] || token.empty() || utf8::sequence_length(token, 0) != token.size()) continue;
    size_t i = 0;
    const uint32_t cp = utf8::decode(token, i);
    if (cp < bmp_char_ids_.size()) bmp_char_ids_[cp] = int32_t(id);
  }

  merges_.reserve(config.merges.size());
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    const int32_t a_id = token_to_id(a), b_id = token_to_id(b);
    if (a_id < 0) fail("model.merges[{}] ('{}' '{}'): '{}' is not in the vocabulary", rank, a, b, a);
    if (b_id < 0) fail("model.merges[{}] ('{}' '{}'): '{}' is not in the vocabulary", rank, a, b, b);
    // The right side carries the continuing-subword prefix, which the merged
    // token has only once (HF BpeBuilder::build).
    if (b.size() < prefix_.size()) {
      fail("model.merges[{}] ('{}' '{}'): '{}' is shorter than the continuing_subword_prefix", rank, a, b, b);
    }
    const std::string merged = a + b.substr(prefix_.size());
    const int32_t new_id = token_to_id(merged);
    if (new_id < 0)
      fail("model.merges[{}] ('{}' '{}'): the merged token '{}' is not in the vocabulary", rank, a, b, merged);
    // A pair listed twice keeps its last rank, as HF's HashMap collect does.
    merges_.insert(a_id, b_id, {uint32_t(rank), new_id});
  }

  if (config.unk_token) unk_id_ = token_to_id(*config.unk_token);
  if (config.unk_token && unk_id_ < 0) unk_missing_ = *config.unk_token;
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(fmt::format("<0x{:02X}>", b));
}

int32_t Bpe::token_to_id(std::string_view token) const { return index_.find(token, tokens_); }

const std::string* Bpe::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= tokens_.size() || !present_[id]) return nullptr;
  return &tokens_[id];
}

void Bpe::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  const bool plain = prefix_.empty() && suffix_.empty();
  std::string decorated;
  int32_t pending_unk = -1;  // length of the unk symbol waiting to be pushed, or -1
  const auto push = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };
  const auto flush_unk = [&] {
    if (pending_unk >= 0) push(unk_id_, uint32_t(pending_unk));
    pending_unk = -1;
  };

  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    int32_t id = -1;
    if (plain) {
      const uint32_t cp = utf8::decode(word, i);
      if (cp < bmp_char_ids_.size()) id = bmp_char_ids_[cp];
      if (cp >= bmp_char_ids_.size() || id < 0) id = token_to_id(word.substr(start, i - start));
    } else {
      utf8::decode(word, i);
      decorated.assign(start == 0 ? "" : prefix_);
      decorated.append(word.substr(start, i - start));
      if (i == word.size()) decorated.append(suffix_);
      id = token_to_id(decorated);
    }
    const auto len = uint32_t(i - start);
    if (id >= 0) {
      flush_unk();
      push(id, len);
      continue;
    }
    const std::string_view spelled = plain ? word.substr(start, len) : std::string_view(decorated);
    if (byte_fallback_ &&
        std::all_of(spelled.begin(), spelled.end(), [&](char c) { return byte_ids_[uint8_t(c)] >= 0; })) {
      // HF pushes the byte tokens without first flushing a pending unk, so
      // the unk lands after them; kept for parity.
      for (const char c : spelled) push(byte_ids_[uint8_t(c)], 1);
      continue;
    }
    if (!unk_missing_.empty()) fail("BPE: the unk token '{}' is not in the vocabulary", unk_missing_);
    if (unk_id_ < 0) continue;  // no unk token: HF drops the character
    if (pending_unk >= 0 && fuse_unk_) {
      pending_unk += int32_t(len);
    } else {
      flush_unk();
      pending_unk = int32_t(len);
    }
  }
  flush_unk();
}

void Bpe::merge_all(std::vector<Symbol>& symbols) const {
  // A candidate merge is (rank << 32 | position of its left symbol): the
  // smallest is the lowest rank, leftmost on ties, which is HF's
  // Word::merge_all order. Eight-byte entries keep the heap cache-friendly
  // when a 1 MB word queues a million of them.
  using Candidate = uint64_t;
  const auto candidate_at = [&](int32_t pos, Candidate& c) {
    const Symbol& left = symbols[pos];
    if (left.next < 0) return false;
    const MergeTable::Merge* m = merges_.find(left.id, symbols[left.next].id);
    if (m) c = (uint64_t(m->rank) << 32) | uint32_t(pos);
    return m != nullptr;
  };
  // Heapify the first candidates at once: O(n), where n pushes are O(n log n).
  std::vector<Candidate> initial;
  initial.reserve(symbols.size());
  Candidate c;
  for (int32_t pos = 0; pos + 1 < int32_t(symbols.size()); ++pos) {
    if (candidate_at(pos, c)) initial.push_back(c);
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>(), std::move(initial));

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto rank = uint32_t(top >> 32);
    const auto pos = int32_t(uint32_t(top));
    Symbol& left = symbols[pos];
    if (left.len == 0 || left.next < 0) continue;
    // Stale entries: one side has merged since this pair was queued. A rank
    // names one pair, so an unchanged rank means an unchanged pair.
    const Symbol right = symbols[left.next];
    const MergeTable::Merge* m = merges_.find(left.id, right.id);
    if (!m || m->rank != rank) continue;

    symbols[left.next].len = 0;
    left.id = m->new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pos;
    if (left.prev >= 0 && candidate_at(left.prev, c)) queue.push(c);
    if (candidate_at(pos, c)) queue.push(c);
  }
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  // Symbol links are 32-bit.
  if (word.size() > size_t(INT32_MAX)) fail("BPE: a {}-byte word is too long (the limit is 2 GB)", word.size());
  if (ignore_merges_) {
    const int32_t id = token_to_id(word);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  initial_symbols(word, symbols);
  merge_all(symbols);
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
}

}  // namespace onebit
