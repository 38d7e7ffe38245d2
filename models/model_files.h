// What a model directory says beside the graph: tokenizer.json,
// generation_config.json, tokenizer_config.json and config.json, as
// transformers' save_pretrained writes them. Each is optional; what is
// missing is left empty and the caller decides whether it matters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onebit {

struct ModelFiles {
  std::string dir;
  std::string tokenizer_path;        // dir/tokenizer.json when it exists
  std::vector<std::string> eos_tokens;  // token strings to resolve (tokenizer_config eos_token)
  std::vector<int64_t> eos_ids;      // generation_config / config eos_token_id
  int64_t max_positions = 0;         // config max_position_embeddings, 0 if unknown
  std::string chat_template;         // tokenizer_config chat_template
  std::string model_type;            // config model_type
};

// Reads the side files of the model at `model_path`. A file that exists but
// is malformed is an Error naming it.
ModelFiles read_model_files(const std::string& model_path);

}  // namespace onebit
