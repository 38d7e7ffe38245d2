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
  std::string max_positions_from;    // where max_positions was read, for messages
  std::string chat_template;         // tokenizer_config chat_template
  std::string model_type;            // config model_type
  int64_t head_dim = 0, kv_heads = 0;  // config head_dim (or hidden_size / num_attention_heads), num_key_value_heads
  SamplingDefaults sampling;
  GenaiConfig genai;
};

// genai_config.json at `path`; an Error names the file and the field at fault.
GenaiConfig read_genai_config(const std::string& path);

// Reads the side files of the model at `model_path`, from `side_dir` (default:
// the model's directory). A file that exists but is malformed is an Error
// naming it.
ModelFiles read_model_files(const std::string& model_path, const std::string& side_dir = "");

// Where a model given as a file or a folder is. A folder is one of:
//   genai       genai_config.json naming the decoder's file (onnxruntime-genai);
//   folder      .onnx files beside tokenizer.json and the configs (model.onnx,
//               or model-VARIANT.onnx / model_VARIANT.onnx);
//   onnx/       the transformers.js / Optimum layout: DIR/onnx/model.onnx,
//               model_fp16.onnx, model_q4.onnx, model_int8.onnx, ..., the
//               tokenizer and configs in DIR.
// `variant` picks among several models (fp32 is model.onnx; otherwise the
// VARIANT of model_VARIANT.onnx); without one a folder with several takes
// model-cached.onnx (the KV-cache graph of scripts/export_onnx.py's pair),
// else model.onnx, and is an error listing the variants when it has
// neither. A folder that fits no layout is an error listing what it holds.
struct ModelLocation {
  std::string model;     // the .onnx file
  std::string side_dir;  // tokenizer.json, the configs
  std::string layout;    // "file", "genai", "folder", "onnx/"
  std::vector<std::string> variants;  // the variants the folder offers
};
ModelLocation locate_model(const std::string& path, const std::string& variant = "");

}  // namespace onebit
