// The tokenizer.json "normalizer": a chain of Unicode normalization forms
// (NFC, NFD, NFKC, NFKD) run by utf8proc. "Sequence" flattens into the chain;
// null is the empty chain. HF's normalization tables are older than
// utf8proc's; the code points that differ are left alone, as HF does (see
// normalizer.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace onebit {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

class Normalizer {
 public:
  void add(NormalForm form) { forms_.push_back(form); }
  bool empty() const { return forms_.empty(); }

  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalForm> forms_;
};

}  // namespace onebit
