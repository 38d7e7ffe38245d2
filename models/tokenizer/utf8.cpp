#include "models/tokenizer/utf8.h"

namespace onebit::utf8 {

namespace {

// The well-formed byte sequences (Unicode 15.0, table 3-7): the allowed range
// of the second byte depends on the lead byte; later bytes are 80..BF.
struct LeadRule {
  int length;  // 0: the byte can never start a character
  unsigned char second_lo, second_hi;
};

LeadRule rule_for(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes the surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

// How many bytes from s[i] belong to the (possibly truncated) sequence: the
// lead plus the continuation bytes that are in range. `complete` tells
// whether that is a whole character.
size_t scan(std::string_view s, size_t i, bool& complete) {
  const auto b = static_cast<unsigned char>(s[i]);
  const LeadRule r = rule_for(b);
  complete = false;
  if (r.length == 0) return 1;
  if (r.length == 1) {
    complete = true;
    return 1;
  }
  size_t n = 1;
  for (int k = 1; k < r.length; ++k) {
    if (i + n >= s.size()) return n;
    const auto c = static_cast<unsigned char>(s[i + n]);
    const unsigned char lo = k == 1 ? r.second_lo : 0x80;
    const unsigned char hi = k == 1 ? r.second_hi : 0xBF;
    if (c < lo || c > hi) return n;
    ++n;
  }
  complete = true;
  return n;
}

}  // namespace

size_t sequence_length(std::string_view s, size_t i) {
  bool complete;
  const size_t n = scan(s, i, complete);
  return complete ? n : 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

size_t append_lossy(std::string_view in, std::string& out, bool final) {
  size_t i = 0;
  size_t clean_from = 0;  // start of the run of well-formed bytes not yet copied
  while (i < in.size()) {
    if (static_cast<unsigned char>(in[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete;
    const size_t n = scan(in, i, complete);
    if (complete) {
      i += n;
      continue;
    }
    if (!final && i + n == in.size() && rule_for(static_cast<unsigned char>(in[i])).length != 0) {
      // A truncated but so far well-formed character: wait for more bytes.
      break;
    }
    out.append(in.substr(clean_from, i - clean_from));
    out.append(kReplacement);
    i += n;
    clean_from = i;
  }
  out.append(in.substr(clean_from, i - clean_from));
  return i;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace onebit::utf8
