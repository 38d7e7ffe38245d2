// UTF-8 helpers shared by the tokenizer. Invalid input is repaired the way
// Rust's String::from_utf8_lossy and Python's bytes.decode("utf-8",
// "replace") do it: each maximal ill-formed subpart becomes one U+FFFD
// (Unicode 15.0, section 3.9, "U+FFFD Substitution of Maximal Subparts"), so
// our repaired text is byte-identical to what HF `tokenizers` decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace onebit::utf8 {

inline constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed sequence starting at s[i], or 0 if the bytes
// there are not a complete well-formed character.
size_t sequence_length(std::string_view s, size_t i);

bool is_valid(std::string_view s);

// Appends `in` to `out`, replacing every maximal ill-formed subpart with
// U+FFFD. With `final == false` a trailing subpart that could still become a
// character when more bytes arrive is left unconsumed; the return value is the
// number of bytes of `in` consumed.
size_t append_lossy(std::string_view in, std::string& out, bool final);

inline std::string lossy(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  append_lossy(in, out, true);
  return out;
}

// Decodes the character at s[i] (which must be well formed) and advances i.
inline uint32_t decode(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  uint32_t cp;
  if (b < 0xE0) {
    cp = ((b & 0x1Fu) << 6) | at(1);
    i += 2;
  } else if (b < 0xF0) {
    cp = ((b & 0x0Fu) << 12) | (at(1) << 6) | at(2);
    i += 3;
  } else {
    cp = ((b & 0x07u) << 18) | (at(1) << 12) | (at(2) << 6) | at(3);
    i += 4;
  }
  return cp;
}

// Byte length of the character whose lead byte is b (1 for stray bytes).
inline size_t lead_length(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append(std::string& out, uint32_t cp);

}  // namespace onebit::utf8
