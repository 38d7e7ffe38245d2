// The regex engine behind Split and ByteLevel pre-tokenizers. HF tokenizers
// compiles these patterns with Oniguruma (Ruby syntax); we run them on PCRE2
// in UTF + UCP mode, JIT-compiled when the library supports it, after a small
// translation that closes the gaps between the two dialects (see
// translate_oniguruma).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onebit {

class Regex {
 public:
  // `pattern` has Oniguruma meaning. Throws onebit::Error with PCRE2's message
  // and the offending offset.
  static Regex compile(std::string_view pattern);
  // Matches `text` literally (Split's {"String": ...} pattern).
  static Regex literal(std::string_view text);

  // Byte ranges [start, end) of the successive non-overlapping matches in
  // `subject`, which must be valid UTF-8. An empty match that ends where the
  // previous match ended is skipped and the search moves one character on,
  // as Oniguruma's find_iter (and Rust's regex) do.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  static Regex build(std::string_view source, std::string_view pcre2_pattern, uint32_t options);
  std::shared_ptr<const Compiled> code_;
  std::string pattern_;
};

// Rewrites an Oniguruma (Ruby syntax) pattern into PCRE2 syntax with the same
// meaning for what tokenizer patterns use:
//   \s \S     -> \p{White_Space} \P{White_Space}: Oniguruma's \s is the
//                White_Space property (it includes U+0085); PCRE2's is not.
//   \h        -> hex digit, as in Ruby (PCRE2's \h is horizontal space).
//   \w \W \b \B -> by Oniguruma's word characters (Alphabetic, marks,
//                decimal digits, connector punctuation), not PCRE2's.
//   \p{L} \p{N} (and \pL \pN) also match the letters and numbers assigned
//                after Unicode 14.0, the version of PCRE2 10.42's tables,
//                up to 16.0, the version HF tokenizers' Oniguruma uses.
//   (?m)      -> (?s): in Ruby, m makes '.' match a newline.
// '^' and '$' are line anchors in Ruby; Regex compiles with PCRE2_MULTILINE
// for that. \d is \p{Nd} in both.
std::string translate_oniguruma(std::string_view pattern);

}  // namespace onebit
