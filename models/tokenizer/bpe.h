// The BPE model of a tokenizer.json: a vocabulary, ranked merges, and the
// merge loop that turns one pre-tokenized word into ids. Behaviour follows HF
// tokenizers' models/bpe (BPE::merge_word and Word::merge_all): the word
// starts as one symbol per character, and the adjacent pair with the lowest
// merge rank (leftmost on ties) merges until no ranked pair is left.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/tokenizer/flat_tables.h"

namespace onebit {

struct BpeConfig {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  // put before every character but the first
  std::string end_of_word_suffix;         // put after the last character
  bool fuse_unk = false;                  // a run of unknown characters becomes one unk
  bool byte_fallback = false;             // an unknown character becomes its <0xXX> byte tokens
  bool ignore_merges = false;             // a word that is itself in the vocabulary is one token
};

class Bpe {
 public:
  // Throws onebit::Error (the caller adds the file name) when a merge names a
  // token, or makes a token, that is not in the vocabulary, or the unk token
  // is missing.
  explicit Bpe(BpeConfig config);

  // Appends the ids of `word` (valid UTF-8) to `ids`.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string* id_to_token(int32_t id) const;   // nullptr if absent
  size_t size() const { return size_; }               // vocabulary entries
  int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the word, -1 at the ends
    uint32_t len;        // bytes of the word covered; 0 once merged away
  };
  // The symbols `word` starts as, with unknown characters resolved.
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  std::vector<std::string> tokens_;    // id -> token
  std::vector<uint8_t> present_;       // id -> whether tokens_[id] is in the vocabulary
  size_t size_ = 0;                    // ids present
  TokenIndex index_;                   // token -> id
  std::vector<int32_t> bmp_char_ids_;  // code point < 0x10000 -> id of the one-character token, -1
  MergeTable merges_;
  int32_t unk_id_ = -1;
  std::string unk_missing_;  // an unk_token absent from the vocabulary: an error only once needed, as in HF
  int32_t byte_ids_[256];    // <0xXX> tokens for byte_fallback, -1 if absent
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

}  // namespace onebit
