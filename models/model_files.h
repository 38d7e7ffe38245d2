// What a model directory says beside the graph: tokenizer.json,
// generation_config.json, tokenizer_config.json and config.json, as
// transformers' save_pretrained writes them. Each is optional; what is
// missing is left empty and the caller decides whether it matters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onebit {

// The sampling settings a model ships, for `--sample`: generation_config.json
// (transformers), and for the fields it lacks genai_config.json's "search"
// (onnxruntime-genai). A field neither sets is empty.
struct SamplingDefaults {
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  std::vector<std::string> sources;  // the files that set any
};

// genai_config.json (onnxruntime-genai): the decoder's file and the names of
// its inputs and outputs, the cache geometry and the context length. The
// cache names are printf patterns with one %d (the layer).
struct GenaiConfig {
  bool present = false;
  std::string path;      // the file read
  std::string filename;  // model.decoder.filename
  std::string input_ids, attention_mask, position_ids;
  std::string past_key_names, past_value_names;
  std::string logits, present_key_names, present_value_names;
  int64_t head_size = 0, kv_heads = 0, layers = 0, context_length = 0;
};

struct ModelFiles {
  std::string dir;
  std::string tokenizer_path;        // dir/tokenizer.json when it exists
  std::vector<std::string> eos_tokens;  // token strings to resolve (tokenizer_config eos_token)
  std::vector<int64_t> eos_ids;      // generation_config / config eos_token_id
  int64_t max_positions = 0;         // config max_position_embeddings, 0 if unknown
  std::string chat_template;         // tokenizer_config chat_template
  std::string model_type;            // config model_type
  SamplingDefaults sampling;
  GenaiConfig genai;
};

// genai_config.json at `path`; an Error names the file and the field at fault.
GenaiConfig read_genai_config(const std::string& path);

// Reads the side files of the model at `model_path`. A file that exists but
// is malformed is an Error naming it.
ModelFiles read_model_files(const std::string& model_path);

}  // namespace onebit
