#include "models/tokenizer/pretokenizer.h"

#include <algorithm>
#include <utility>

#include "models/tokenizer/byte_level.h"

namespace onebit {

namespace {

struct Segment {
  size_t start, end;
  bool is_match;
};

const Regex& gpt2_regex() {
  static const Regex re = Regex::compile(kGpt2Pattern);
  return re;
}

void split_piece(const SplitStep& step, std::string_view piece, std::vector<std::string>& out) {
  const auto ranges = split_ranges(step.pattern.find_all(piece), piece.size(), step.behavior, step.invert);
  for (const auto& [start, end] : ranges) {
    if (end > start) out.emplace_back(piece.substr(start, end - start));
  }
}

void byte_level_piece(const ByteLevelStep& step, std::string_view piece, std::vector<std::string>& out) {
  std::string prefixed;
  if (step.add_prefix_space && (piece.empty() || piece.front() != ' ')) {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  std::vector<std::pair<size_t, size_t>> ranges;
  if (step.use_regex) {
    ranges = split_ranges(gpt2_regex().find_all(piece), piece.size(), SplitBehavior::Isolated, false);
  } else {
    ranges.emplace_back(0, piece.size());
  }
  for (const auto& [start, end] : ranges) {
    if (end == start) continue;
    std::string word;
    byte_level::encode(piece.substr(start, end - start), word);
    out.push_back(std::move(word));
  }
}

// Walks the segments (backward for MergedWithNext) and folds a segment into
// the range kept last when `joins(is_match, previous is_match)`, as the
// merging behaviors of HF's NormalizedString::split do.
template <class It, class Joins>
void merge_runs(It first, It last, Joins joins, bool backward, std::vector<std::pair<size_t, size_t>>& kept) {
  bool previous_match = false;
  for (; first != last; ++first) {
    if (!kept.empty() && joins(first->is_match, previous_match)) {
      if (backward) {
        kept.back().first = first->start;
      } else {
        kept.back().second = first->end;
      }
    } else {
      kept.emplace_back(first->start, first->end);
    }
    previous_match = first->is_match;
  }
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_ranges(const std::vector<std::pair<size_t, size_t>>& matches, size_t size,
                                                    SplitBehavior behavior, bool invert) {
  // The piece as alternating delimiter / non-delimiter segments (HF
  // Pattern::find_matches), flags flipped for invert.
  std::vector<Segment> segments;
  size_t previous = 0;
  for (const auto& [start, end] : matches) {
    if (start != previous) segments.push_back({previous, start, invert});
    segments.push_back({start, end, !invert});
    previous = end;
  }
  if (previous != size || segments.empty()) segments.push_back({previous, size, invert});

  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(segments.size());
  const auto same_kind = [](bool match, bool previous) { return match == previous; };
  const auto match_after_other = [](bool match, bool previous) { return match && !previous; };
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Segment& s : segments) {
        if (!s.is_match) kept.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::Isolated:
      for (const Segment& s : segments) kept.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::Contiguous: merge_runs(segments.begin(), segments.end(), same_kind, false, kept); break;
    case SplitBehavior::MergedWithPrevious:
      merge_runs(segments.begin(), segments.end(), match_after_other, false, kept);
      break;
    case SplitBehavior::MergedWithNext:
      merge_runs(segments.rbegin(), segments.rend(), match_after_other, true, kept);
      std::reverse(kept.begin(), kept.end());
      break;
  }
  return kept;
}

void PreTokenizer::add_split(SplitStep step) { steps_.emplace_back(std::move(step)); }

void PreTokenizer::add_byte_level(ByteLevelStep step) { steps_.emplace_back(step); }

void PreTokenizer::run(std::string_view piece, std::vector<std::string>& words) const {
  if (steps_.empty()) {
    if (!piece.empty()) words.emplace_back(piece);
    return;
  }
  std::vector<std::string> current{std::string(piece)};
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    for (const std::string& p : current) {
      if (const auto* split = std::get_if<SplitStep>(&step)) {
        split_piece(*split, p, next);
      } else {
        byte_level_piece(std::get<ByteLevelStep>(step), p, next);
      }
    }
    std::swap(current, next);
  }
  for (std::string& w : current) words.push_back(std::move(w));
}

}  // namespace onebit
