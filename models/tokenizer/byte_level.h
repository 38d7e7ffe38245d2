// GPT-2's byte-level alphabet: every byte is shown as one printable
// character so a BPE vocabulary of strings can cover arbitrary bytes. The
// printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 bytes map, in byte order, to U+0100..U+0143 (so a
// space is 'Ġ' U+0120 and a newline 'Ċ' U+010A). Reference: bytes_to_unicode()
// in openai/gpt-2 src/encoder.py, which HF tokenizers' ByteLevel reproduces.
#pragma once

#include <string>
#include <string_view>

namespace onebit::byte_level {

// Appends the byte-level spelling of `bytes` (each byte becomes the UTF-8 of
// its stand-in character).
void encode(std::string_view bytes, std::string& out);

// Appends the bytes a byte-level token stands for. Returns false, appending
// nothing, if some character of `token` is not in the alphabet (HF then keeps
// the token's own UTF-8 bytes; see Decoder).
bool decode(std::string_view token, std::string& out);

// The stand-in character for byte b, as UTF-8.
std::string_view char_for(unsigned char b);

}  // namespace onebit::byte_level
