#include "models/lookup.h"

#include <algorithm>

namespace onebit {

std::vector<int32_t> lookup_draft(std::span<const int32_t> seq, int64_t max_tokens) {
  const int64_t size = static_cast<int64_t>(seq.size());
  if (max_tokens <= 0) return {};
  for (int64_t n = std::min(kLookupMaxNgram, size - 1); n >= kLookupMinNgram; --n) {
    const auto key = seq.subspan(static_cast<size_t>(size - n));
    // The match must end before the key starts, so a token follows it.
    for (int64_t at = size - n - 1; at >= 0; --at) {
      if (!std::equal(key.begin(), key.end(), seq.begin() + at)) continue;
      const int64_t from = at + n, to = std::min(size, from + max_tokens);
      return {seq.begin() + from, seq.begin() + to};
    }
  }
  return {};
}

}  // namespace onebit
