// The tokenizer.json "pre_tokenizer": splits each normalized piece of text
// into the words BPE sees. "Sequence" flattens into an ordered list of steps,
// each applied to every piece the previous step produced (as HF's
// PreTokenizedString does); empty pieces are dropped after every step.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "models/tokenizer/regex.h"

namespace onebit {

// What Split does with the pieces a pattern matches (HF
// SplitDelimiterBehavior), shown on "a-b" split on "-":
//   Removed "a" "b"; Isolated "a" "-" "b"; MergedWithPrevious "a-" "b";
//   MergedWithNext "a" "-b"; Contiguous: runs of adjacent matches become one.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct SplitStep {
  Regex pattern;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;  // the pattern matches the pieces to keep, not the delimiters
};

struct ByteLevelStep {
  bool add_prefix_space = false;  // a ' ' in front of every piece not starting with one
  bool use_regex = true;          // split with the GPT-2 pattern before mapping bytes
};

class PreTokenizer {
 public:
  void add_split(SplitStep step);
  void add_byte_level(ByteLevelStep step);
  bool empty() const { return steps_.empty(); }

  // Appends the words of `piece` (valid UTF-8) to `words`.
  void run(std::string_view piece, std::vector<std::string>& words) const;

 private:
  std::vector<std::variant<SplitStep, ByteLevelStep>> steps_;
};

// The [start, end) ranges `behavior` keeps, given the pattern's matches in a
// `size`-byte piece (HF NormalizedString::split).
std::vector<std::pair<size_t, size_t>> split_ranges(const std::vector<std::pair<size_t, size_t>>& matches, size_t size,
                                                    SplitBehavior behavior, bool invert);

// GPT-2's pre-tokenization pattern, used by ByteLevel with use_regex.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace onebit
