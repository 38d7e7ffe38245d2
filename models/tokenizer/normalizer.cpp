#include "models/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "base/error.h"
#include "models/tokenizer/unicode_delta.h"
#include "models/tokenizer/utf8.h"

namespace onebit {

namespace {

// HF's normalization tables are older than utf8proc's (see unicode_delta.h).
bool unknown_to_hf(uint32_t cp) {
  return cp >= 0x300 && unicode_delta::contains(unicode_delta::kUnknownToHfNormalizers, cp);
}

utf8proc_option_t options_for(NormalForm form) {
  // STABLE: never apply decompositions that Unicode might later revise.
  switch (form) {
    case NormalForm::NFC: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalForm::NFD: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::NFKC: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::NFKD: return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  fail("normalizer: unknown normal form {}", static_cast<int>(form));
}

void append_normalized(std::string_view text, utf8proc_option_t options, std::string& out) {
  if (text.empty()) return;
  utf8proc_uint8_t* mapped = nullptr;
  // An explicit length (no UTF8PROC_NULLTERM) keeps U+0000 inside the text.
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped, options);
  if (n < 0) fail("normalizer: utf8proc failed: {}", utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

// Normalizes the runs between code points unknown to HF and copies those code
// points as they are: a starter that never composes splits normalization into
// independent runs, which is what HF's tables make of them.
std::string normalize(std::string_view text, NormalForm form) {
  const utf8proc_option_t options = options_for(form);
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t run = 0, i = 0;
  while (i < text.size()) {
    const size_t at = i;
    if (!unknown_to_hf(utf8::decode(text, i))) continue;
    append_normalized(text.substr(run, at - run), options, out);
    out.append(text.substr(at, i - at));
    run = i;
  }
  append_normalized(text.substr(run), options, out);
  return out;
}

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
  std::string current(text);
  // ASCII is invariant under every normal form.
  if (forms_.empty() || is_ascii(current)) return current;
  for (const NormalForm form : forms_) current = normalize(current, form);
  return current;
}

}  // namespace onebit
