#include "models/tokenizer/added_tokens.h"

#include <algorithm>

#include "models/tokenizer/regex.h"
#include "models/tokenizer/utf8.h"

namespace onebit {

namespace {

// Rust regex's \s (HF matches lstrip/rstrip whitespace with it): the Unicode
// White_Space property.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Rust regex's Unicode \w, which decides single_word boundaries.
bool is_word_char(std::string_view ch) {
  static const Regex word = Regex::compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  return !word.find_all(ch).empty();
}

// The character ending at text[end - 1].
std::string_view last_char(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return text.substr(start, end - start);
}

std::string_view first_char(std::string_view text, size_t start) {
  return text.substr(start, utf8::lead_length(static_cast<unsigned char>(text[start])));
}

// Start of the whitespace run that ends at text[end].
size_t whitespace_run_start(std::string_view text, size_t end) {
  while (end > 0) {
    const std::string_view ch = last_char(text, end);
    size_t i = 0;
    if (!is_white_space(utf8::decode(ch, i))) break;
    end -= ch.size();
  }
  return end;
}

// End of the whitespace run that starts at text[start].
size_t whitespace_run_end(std::string_view text, size_t start) {
  while (start < text.size()) {
    size_t i = start;
    if (!is_white_space(utf8::decode(text, i))) break;
    start = i;
  }
  return start;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view spelling, int32_t token) {
  if (spelling.empty()) return;
  first[static_cast<uint8_t>(spelling[0])] = true;
  int32_t node = 0;
  for (const char c : spelling) {
    const auto byte = static_cast<uint8_t>(c);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const std::pair<uint8_t, int32_t>& e, uint8_t b) { return e.first < b; });
    if (it == children.end() || it->first != byte) {
      const auto child = static_cast<int32_t>(nodes.size());
      it = children.insert(it, {byte, child});
      nodes.emplace_back();  // invalidates `children`, not the child index
      node = child;
    } else {
      node = it->second;
    }
  }
  nodes[node].token = token;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t j = pos; j < text.size(); ++j) {
    const auto byte = static_cast<uint8_t>(text[j]);
    const auto& children = nodes[node].children;
    const auto it = std::lower_bound(children.begin(), children.end(), byte,
                                     [](const std::pair<uint8_t, int32_t>& e, uint8_t b) { return e.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      length = j + 1 - pos;
    }
  }
  return best;
}

void AddedVocabulary::add(AddedToken token) {
  const auto index = static_cast<int32_t>(tokens_.size());
  index_by_id_[token.id] = size_t(index);
  (token.normalized ? normalized_ : raw_).insert(token.spelling, index);
  tokens_.push_back(std::move(token));
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  const auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::by_content(std::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return &t;
  }
  return nullptr;
}

std::vector<AddedSpan> AddedVocabulary::split(std::string_view text, bool normalized_set, bool split_special) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  std::vector<AddedSpan> spans;
  size_t start_offset = 0;  // end of what the previous kept match covered
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t index = trie.longest_at(text, pos, length);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + length;
    // The scan resumes after the raw match even when the match is discarded
    // or its span grows below, as HF's aho-corasick iteration does.
    pos = stop;
    const AddedToken& token = tokens_[size_t(index)];
    if (!split_special && token.special) continue;
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char(last_char(text, start));
      const bool space_after = stop == text.size() || !is_word_char(first_char(text, stop));
      if (!space_before || !space_after) continue;
    }
    // An earlier match may already have taken the whitespace.
    if (token.lstrip) start = std::max(whitespace_run_start(text, start), start_offset);
    if (token.rstrip) stop = whitespace_run_end(text, stop);
    if (start_offset < start) spans.push_back({start_offset, start, -1});
    spans.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) spans.push_back({start_offset, text.size(), -1});
  return spans;
}

}  // namespace onebit
