#include "models/model_files.h"

#include <simdjson.h>

#include <filesystem>

#include "graph/error.h"

namespace onebit {

namespace {

namespace fs = std::filesystem;
using simdjson::dom::element;

// Parses `path` if it exists; false when it does not.
bool parse_if_exists(simdjson::dom::parser& parser, const fs::path& path, element& root) {
  if (!fs::exists(path)) return false;
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path.string()).get(text)) fail("{}: cannot read", path.string());
  if (auto err = parser.parse(text).get(root)) fail("{}: not valid JSON: {}", path.string(), simdjson::error_message(err));
  return true;
}

// eos_token_id: an int or a list of ints.
void read_ids(element value, std::vector<int64_t>& out, const std::string& where) {
  int64_t one;
  if (!value.get_int64().get(one)) {
    out.push_back(one);
    return;
  }
  simdjson::dom::array list;
  if (value.get_array().get(list)) {
    if (value.is_null()) return;
    fail("{}: eos_token_id is neither an integer nor a list", where);
  }
  for (element e : list) {
    if (e.get_int64().get(one)) fail("{}: eos_token_id holds a non-integer", where);
    out.push_back(one);
  }
}

}  // namespace

ModelFiles read_model_files(const std::string& model_path) {
  ModelFiles f;
  const fs::path dir = fs::path(model_path).parent_path();
  f.dir = dir.empty() ? "." : dir.string();
  const fs::path base(f.dir);
  if (fs::exists(base / "tokenizer.json")) f.tokenizer_path = (base / "tokenizer.json").string();

  simdjson::dom::parser parser;
  element root;
  if (parse_if_exists(parser, base / "generation_config.json", root)) {
    element v;
    if (!root["eos_token_id"].get(v)) read_ids(v, f.eos_ids, (base / "generation_config.json").string());
  }
  if (parse_if_exists(parser, base / "config.json", root)) {
    element v;
    if (f.eos_ids.empty() && !root["eos_token_id"].get(v)) read_ids(v, f.eos_ids, (base / "config.json").string());
    int64_t n;
    if (!root["max_position_embeddings"].get_int64().get(n)) f.max_positions = n;
    std::string_view type;
    if (!root["model_type"].get_string().get(type)) f.model_type = std::string(type);
  }
  if (parse_if_exists(parser, base / "tokenizer_config.json", root)) {
    element v;
    std::string_view s;
    if (!root["eos_token"].get(v)) {
      if (!v.get_string().get(s)) f.eos_tokens.emplace_back(s);
      else if (!v["content"].get_string().get(s)) f.eos_tokens.emplace_back(s);
    }
    if (!root["chat_template"].get_string().get(s)) f.chat_template = std::string(s);
  }
  return f;
}

}  // namespace onebit
