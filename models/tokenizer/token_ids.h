// Token ids written by hand: `--prompt-ids 1,2,3`, `1bit tokenize --decode
// '[1, 2]'`. One parser for every command.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace onebit {

// Ids separated by commas and/or whitespace, optionally inside one pair of
// brackets ("[9707, 1879]", "9707 1879", "9707,1879"). Each id is a decimal
// integer in [0, 2^31); anything else ("1a2", "-1", "1.5", "1,,2") is an
// Error naming the offending word. `what` prefixes the message.
std::vector<int32_t> parse_token_ids(std::string_view text, std::string_view what);

}  // namespace onebit
