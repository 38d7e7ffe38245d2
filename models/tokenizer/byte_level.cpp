#include "models/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "models/tokenizer/utf8.h"

namespace onebit::byte_level {

namespace {

constexpr uint32_t kLastStandIn = 0x143;

struct Tables {
  std::array<std::string, 256> to_char;           // byte -> UTF-8 of its stand-in
  std::array<int16_t, kLastStandIn + 1> to_byte;  // stand-in code point -> byte, -1 if none
};

bool stands_for_itself(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    t.to_byte.fill(-1);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t cp = stands_for_itself(b) ? b : next++;
      utf8::append(t.to_char[b], cp);
      t.to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return t;
}

}  // namespace

void encode(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (const char c : bytes) out.append(t.to_char[static_cast<unsigned char>(c)]);
}

bool decode(std::string_view token, std::string& out) {
  const Tables& t = tables();
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    if (utf8::sequence_length(token, i) == 0) {
      out.resize(mark);
      return false;
    }
    const uint32_t cp = utf8::decode(token, i);
    if (cp > kLastStandIn || t.to_byte[cp] < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(t.to_byte[cp]));
  }
  return true;
}

std::string_view char_for(unsigned char b) { return tables().to_char[b]; }

}  // namespace onebit::byte_level
