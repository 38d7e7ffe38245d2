// `--stop STRING`: generation ends where the generated text first contains
// one of the stop strings, and the text shown ends before it. The text comes
// a token at a time, so a stop string may arrive split over several tokens:
// whatever could still be the start of one is held back until the next
// token shows whether it is (llama.cpp's find_partial_stop_string does the
// same).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace onebit {

class StopStrings {
 public:
  // Empty strings are an Error (they would match before any text).
  explicit StopStrings(std::vector<std::string> stops);

  bool empty() const { return stops_.empty(); }
  // Appends the next piece of text; returns what can be shown now. When a
  // stop string appears, returns the text before its first occurrence (the
  // earliest, the longest on a tie) and stopped() turns true; pushes after
  // that return nothing.
  std::string push(std::string_view text);
  // The text held back, at the end of a generation no stop string ended.
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // shown to nobody yet: a possible start of a stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace onebit
