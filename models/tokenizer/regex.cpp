#include "models/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>
#include <new>

#include "base/error.h"
#include "models/tokenizer/unicode_delta.h"
#include "models/tokenizer/utf8.h"

namespace onebit {

namespace {

using unicode_delta::kNewLetters;
using unicode_delta::kNewNumbers;
using unicode_delta::kNewWordChars;
using unicode_delta::Range;

template <size_t N>
std::string class_items(const char* property, const Range (&extra)[N]) {
  std::string s = fmt::format("\\p{{{}}}", property);
  for (const Range& r : extra) s += fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r.lo, r.hi);
  return s;
}

// The property letter of \p{L}, \pL, \p{N} or \pN at pattern[i] (just after
// the backslash and 'p'/'P'), with the number of bytes it spans; 0 if the
// property is something else.
char letter_or_number(std::string_view pattern, size_t i, size_t& span) {
  if (i < pattern.size() && (pattern[i] == 'L' || pattern[i] == 'N')) {
    span = 1;
    return pattern[i];
  }
  if (i + 2 < pattern.size() && pattern[i] == '{' && pattern[i + 2] == '}' &&
      (pattern[i + 1] == 'L' || pattern[i + 1] == 'N')) {
    span = 3;
    return pattern[i + 1];
  }
  return 0;
}

std::string extended_property(char which) {
  return which == 'L' ? class_items("L", kNewLetters) : class_items("N", kNewNumbers);
}

// Oniguruma's Unicode \w: Alphabetic, marks, decimal digits and connector
// punctuation, plus the Latin-1 fractions and superscript digits its
// ISO-8859-1 table counts as word characters (PCRE2's UCP \w is letters,
// numbers and '_').
std::string word_items() {
  return class_items("Alphabetic", kNewWordChars) + "\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
}

void translate_escape(std::string_view p, size_t& i, bool in_class, std::string& out) {
  // p[i] is the backslash.
  if (i + 1 >= p.size()) {
    out.push_back('\\');
    ++i;
    return;
  }
  const char c = p[i + 1];
  size_t span = 0;
  if (c == 's') {
    out += "\\p{White_Space}";
  } else if (c == 'S') {
    out += "\\P{White_Space}";
  } else if (c == 'h') {
    out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
  } else if (c == 'H' && !in_class) {
    out += "[^0-9a-fA-F]";
  } else if (c == 'H') {
    fail("regex '{}': \\H inside a character class is not supported", p);
  } else if (c == 'w') {
    out += in_class ? word_items() : fmt::format("[{}]", word_items());
  } else if (c == 'W' && !in_class) {
    out += fmt::format("[^{}]", word_items());
  } else if (c == 'W') {
    fail("regex '{}': \\W inside a character class is not supported", p);
  } else if ((c == 'b' || c == 'B') && !in_class) {
    // A word boundary by Oniguruma's \w, spelled with lookarounds.
    const std::string at_boundary = fmt::format("(?:(?<=[{0}])(?![{0}])|(?<![{0}])(?=[{0}]))", word_items());
    out += c == 'b' ? at_boundary : fmt::format("(?!{})", at_boundary);
  } else if ((c == 'p' || c == 'P') && letter_or_number(p, i + 2, span) != 0) {
    const std::string items = extended_property(letter_or_number(p, i + 2, span));
    if (in_class && c == 'p') {
      out += items;
    } else if (in_class) {
      // A negated property cannot be widened inside a class; this misses only
      // the code points in unicode_delta.h.
      out.append(p.substr(i, 2 + span));
    } else {
      out += c == 'p' ? fmt::format("[{}]", items) : fmt::format("[^{}]", items);
    }
    i += 2 + span;
    return;
  } else {
    out.append(p.substr(i, 2));
  }
  i += 2;
}

// "(?imx-imx)" or "(?imx-imx:": Ruby's m is PCRE2's s.
bool translate_options(std::string_view p, size_t& i, std::string& out) {
  if (p.substr(i, 2) != "(?") return false;
  size_t j = i + 2;
  while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
  if (j == i + 2 || j >= p.size() || (p[j] != ':' && p[j] != ')')) return false;
  out += "(?";
  for (size_t k = i + 2; k < j; ++k) out.push_back(p[k] == 'm' ? 's' : p[k]);
  i = j;
  return true;
}

struct MatchScratch {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    context = pcre2_match_context_create(nullptr);
    // A 1 MB pre-token can make a pattern backtrack deeply; the default 32 KB
    // JIT stack is too small for that.
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  int class_depth = 0;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      translate_escape(p, i, class_depth > 0, out);
    } else if (c == '[') {
      ++class_depth;
      out.push_back(c);
      ++i;
      // A ']' right after '[' or '[^' is a literal.
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      if (i < p.size() && p[i] == ']') out.push_back(p[i++]);
    } else if (c == ']' && class_depth > 0) {
      --class_depth;
      out.push_back(c);
      ++i;
    } else if (class_depth == 0 && translate_options(p, i, out)) {
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

Regex Regex::build(std::string_view source, std::string_view pcre2_pattern, uint32_t options) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()), pcre2_pattern.size(),
                                 PCRE2_UTF | options, &code, &offset, nullptr);
  if (!re) fail("regex '{}': {} (at offset {} of '{}')", source, pcre2_message(code), offset, pcre2_pattern);
  // JIT is an optimization: when it is unavailable the interpreter runs.
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  Regex r;
  auto compiled = std::make_shared<Compiled>();
  compiled->code = re;
  r.code_ = std::move(compiled);
  r.pattern_ = std::string(source);
  return r;
}

Regex Regex::compile(std::string_view pattern) {
  return build(pattern, translate_oniguruma(pattern), PCRE2_UCP | PCRE2_MULTILINE);
}

Regex Regex::literal(std::string_view text) { return build(text, text, PCRE2_LITERAL); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  thread_local MatchScratch scratch;
  std::vector<std::pair<size_t, size_t>> matches;
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> owned(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
  pcre2_match_data* data = owned.get();
  if (!data) throw std::bad_alloc();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t from = 0;
  bool have_previous = false;
  size_t previous_end = 0;
  while (from <= subject.size()) {
    // The subject was validated once up front; re-checking it on each call
    // would make a long pre-token quadratic.
    const int rc = pcre2_match(code_->code, s, subject.size(), from, PCRE2_NO_UTF_CHECK, data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      fail("regex '{}': matching failed on a {}-byte piece: {}", pattern_, subject.size(), pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    const size_t start = ov[0], end = ov[1];
    if (start == end && have_previous && previous_end == end) {
      if (from >= subject.size()) break;
      from += utf8::lead_length(static_cast<unsigned char>(subject[from]));
      continue;
    }
    matches.emplace_back(start, end);
    have_previous = true;
    previous_end = end;
    from = end;
  }
  return matches;
}

}  // namespace onebit
