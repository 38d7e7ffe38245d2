// Added tokens: strings (special ones like "<|im_start|>" and ordinary ones
// like "<think>") that are cut out of the input whole, before normalization
// and BPE. Matching follows HF tokenizers' AddedVocabulary: leftmost-longest,
// non-overlapping, then per-token options decide what a match takes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace onebit {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // only match when not inside a word
  bool lstrip = false;       // the match swallows the whitespace before it
  bool rstrip = false;       // the match swallows the whitespace after it
  bool normalized = true;    // match against normalized text, not the raw input
  bool special = false;      // skipped by decode(skip_special) and by split_special == false
  // How the token appears in the text it is matched in: the content, or for
  // normalized tokens the normalized content. HF's id_to_token and decode
  // give this spelling too. Set by AddedVocabulary::build.
  std::string spelling;
};

// A span of the input: text to tokenize (id < 0) or an added token.
struct AddedSpan {
  size_t start, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // `tokens` carry their final ids; `normalize` spells the content of the
  // tokens with normalized == true as they appear in normalized text.
  template <class Normalize>
  void build(std::vector<AddedToken> tokens, Normalize&& normalize) {
    for (AddedToken& t : tokens) {
      t.spelling = t.normalized ? normalize(t.content) : t.content;
      add(std::move(t));
    }
  }

  // Splits `text` on the tokens of one set (normalized or raw). With
  // split_special == false, special tokens are left in the text (HF's
  // encode_special_tokens).
  std::vector<AddedSpan> split(std::string_view text, bool normalized_set, bool split_special) const;

  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(std::string_view content) const;
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over the token spellings of one set.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                 // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    std::array<bool, 256> first{};  // bytes a spelling can start with

    void insert(std::string_view spelling, int32_t token);
    // Index of the longest token spelled at text[pos...], and its length.
    int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  };

  void add(AddedToken token);

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  Trie raw_, normalized_;
};

}  // namespace onebit
