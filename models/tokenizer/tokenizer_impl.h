// The parts of a loaded tokenizer.json, shared by the loader
// (tokenizer_json.cpp) and the pipeline (tokenizer.cpp). Not for callers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/tokenizer/added_tokens.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/normalizer.h"
#include "models/tokenizer/pretokenizer.h"
#include "models/tokenizer/tokenizer.h"

namespace onebit {

// One element of TemplateProcessing's "single" template: the encoded text
// ($A) or the ids of a special token.
struct TemplatePiece {
  bool is_sequence = false;
  std::vector<int32_t> ids;
};

enum class DecoderKind {
  Join,       // no decoder: HF joins the token strings with ' '
  ByteLevel,  // tokens spell bytes in the byte-level alphabet
};

struct Tokenizer::Impl {
  std::string path;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::optional<Bpe> model;
  AddedVocabulary added;
  std::vector<TemplatePiece> post_template;  // empty: the ids pass through
  DecoderKind decoder = DecoderKind::Join;
  int32_t max_id = -1;
};

}  // namespace onebit
