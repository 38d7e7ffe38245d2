#include "models/tokenizer/token_ids.h"

#include <charconv>
#include <string>

#include "base/error.h"

namespace onebit {

std::vector<int32_t> parse_token_ids(std::string_view text, std::string_view what) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  text = text.substr(b, e - b);
  if (!text.empty() && text.front() == '[') {
    if (text.back() != ']') fail("{}: '[' without a closing ']'", what);
    text = text.substr(1, text.size() - 2);
  }
  std::vector<int32_t> ids;
  size_t i = 0;
  bool need_id = false;  // after a comma, another id must follow
  while (i < text.size()) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    if (text[i] == ',') {
      if (ids.empty() || need_id) fail("{}: an empty entry between commas in '{}'", what, text);
      need_id = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_space(text[j]) && text[j] != ',') ++j;
    const std::string_view word = text.substr(i, j - i);
    int64_t v = -1;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || end != word.data() + word.size() || v < 0 || v > INT32_MAX || word.front() == '+')
      fail("{}: '{}' is not a token id (a decimal integer from 0 to {})", what, word, INT32_MAX);
    ids.push_back(static_cast<int32_t>(v));
    need_id = false;
    i = j;
  }
  if (need_id) fail("{}: a trailing comma in '{}'", what, text);
  return ids;
}

}  // namespace onebit
