#include "models/model_files.h"

#include <simdjson.h>

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/json.h"
#include "base/paths.h"
#include "base/text_file.h"

namespace onebit {

namespace {

namespace fs = std::filesystem;
namespace od = simdjson::ondemand;

// The most a side file (config.json, genai_config.json, a chat template)
// may hold: real ones are kilobytes, tokenizer_config.json with its added
// tokens a few megabytes. A file past it is an error, not an allocation.
constexpr size_t kMaxSideFileBytes = size_t{64} << 20;

// On-demand parsing reads only the fields asked for, so a value these files
// may carry that the DOM parser rejects (tokenizer_config's model_max_length
// of 1e30 written as a 31-digit integer) does not stop us.
class JsonFile {
 public:
  explicit JsonFile(const fs::path& path)
      : path_(path.string()), text_(read_text_file(path_, kMaxSideFileBytes, "model side file")) {}
  // Calls f(value) for each top-level field named `key` found.
  template <class F>
  void field(std::string_view key, F&& f) {
    od::document doc;
    if (parser_.iterate(text_).get(doc)) fail("{}: not valid JSON", path_);
    od::object obj;
    if (doc.get_object().get(obj)) fail("{}: not a JSON object", path_);
    for (auto member : obj) {
      std::string_view k;
      if (member.unescaped_key().get(k)) fail("{}: not valid JSON", path_);
      if (k != key) continue;
      od::value v;
      if (member.value().get(v)) fail("{}: not valid JSON at '{}'", path_, key);
      f(v);
      return;
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  simdjson::padded_string text_;
  od::parser parser_;
};

// eos_token_id: an int or a list of ints (or null).
void read_ids(od::value v, std::vector<int64_t>& out, const std::string& where) {
  od::json_type type;
  if (v.type().get(type)) fail("{}: eos_token_id is malformed", where);
  if (type == od::json_type::null) return;
  if (type == od::json_type::number) {
    int64_t id;
    if (v.get_int64().get(id)) fail("{}: eos_token_id is not an integer", where);
    out.push_back(id);
    return;
  }
  od::array list;
  if (v.get_array().get(list)) fail("{}: eos_token_id is neither an integer nor a list", where);
  for (auto e : list) {
    int64_t id;
    if (e.get_int64().get(id)) fail("{}: eos_token_id holds a non-integer", where);
    out.push_back(id);
  }
}

// The sampling fields of a generation config; `fields(key, f)` calls f on
// the value of `key` when there is one. Fills only what is still unset;
// whether it set any.
template <class Fields>
bool read_sampling(Fields&& fields, SamplingDefaults& d) {
  bool any = false;
  const auto number = [&](od::value v, std::optional<double>& out) {
    double x;
    if (out || v.get_double().get(x)) return;
    out = x;
    any = true;
  };
  fields("do_sample", [&](od::value v) {
    bool b;
    if (!d.do_sample && !v.get_bool().get(b)) d.do_sample = b, any = true;
  });
  fields("temperature", [&](od::value v) { number(v, d.temperature); });
  fields("top_p", [&](od::value v) { number(v, d.top_p); });
  fields("min_p", [&](od::value v) { number(v, d.min_p); });
  fields("repetition_penalty", [&](od::value v) { number(v, d.repetition_penalty); });
  fields("top_k", [&](od::value v) {
    int64_t k;
    if (!d.top_k && !v.get_int64().get(k)) d.top_k = k, any = true;
  });
  return any;
}

std::string read_text(const fs::path& p) { return read_text_file(p.string(), kMaxSideFileBytes, "model side file"); }

}  // namespace

GenaiConfig read_genai_config(const std::string& path) {
  GenaiConfig c;
  c.present = true;
  c.path = path;
  Json j;
  try {
    j = Json::parse(read_text(path));
  } catch (const std::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
  const auto str = [&](const Json& o, const char* key, std::string& out, const char* where) {
    if (!o.is_object() || !o.contains(key)) return;
    if (!o[key].is_string()) fail("{}: {}.{} is not a string", path, where, key);
    out = o[key].get<std::string>();
  };
  const auto num = [&](const Json& o, const char* key, int64_t& out, const char* where) {
    if (!o.is_object() || !o.contains(key)) return;
    if (!o[key].is_number_integer()) fail("{}: {}.{} is not an integer", path, where, key);
    out = o[key].get<int64_t>();
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("{}: no \"model\" object", path);
  const Json& model = j["model"];
  num(model, "context_length", c.context_length, "model");
  if (model.contains("decoder")) {
    const Json& dec = model["decoder"];
    str(dec, "filename", c.filename, "model.decoder");
    num(dec, "head_size", c.head_size, "model.decoder");
    num(dec, "num_key_value_heads", c.kv_heads, "model.decoder");
    num(dec, "num_hidden_layers", c.layers, "model.decoder");
    if (dec.contains("inputs")) {
      const Json& in = dec["inputs"];
      str(in, "input_ids", c.input_ids, "model.decoder.inputs");
      str(in, "attention_mask", c.attention_mask, "model.decoder.inputs");
      str(in, "position_ids", c.position_ids, "model.decoder.inputs");
      str(in, "past_key_names", c.past_key_names, "model.decoder.inputs");
      str(in, "past_value_names", c.past_value_names, "model.decoder.inputs");
    }
    if (dec.contains("outputs")) {
      const Json& out = dec["outputs"];
      str(out, "logits", c.logits, "model.decoder.outputs");
      str(out, "present_key_names", c.present_key_names, "model.decoder.outputs");
      str(out, "present_value_names", c.present_value_names, "model.decoder.outputs");
    }
  }
  for (const std::string* pattern : {&c.past_key_names, &c.past_value_names, &c.present_key_names, &c.present_value_names})
    if (!pattern->empty() && pattern->find("%d") == std::string::npos)
      fail("{}: cache name pattern '{}' has no %d for the layer", path, *pattern);
  return c;
}

namespace {

// "model.onnx" -> "fp32"; "model_q4.onnx", "model-cached.onnx" -> "q4", "cached";
// any other stem is its own variant.
std::string variant_of(const std::string& file) {
  const std::string stem = fs::path(file).stem().string();
  if (stem == "model") return "fp32";
  if (stem.rfind("model_", 0) == 0 || stem.rfind("model-", 0) == 0) return stem.substr(6);
  return stem;
}

std::vector<std::string> onnx_files(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".onnx") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "nothing" : s;
}

}  // namespace

ModelLocation locate_model(const std::string& path, const std::string& variant) {
  ModelLocation loc;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!variant.empty()) fail("{}: --variant {} picks a model inside a folder; this is a file", path, variant);
    loc.model = path;
    loc.layout = "file";
    return loc;
  }
  const fs::path dir(path);
  loc.side_dir = dir.string();
  if (fs::exists(dir / "genai_config.json")) {
    const GenaiConfig g = read_genai_config((dir / "genai_config.json").string());
    if (g.filename.empty()) fail("{}: model.decoder.filename is missing", g.path);
    if (!fs::exists(dir / g.filename)) fail("{}: names the decoder '{}', which is not in {}", g.path, g.filename, path);
    with_context(g.path, [&] { resolve_inside(dir.string(), g.filename, "model.decoder.filename"); });
    if (!variant.empty() && variant != variant_of(g.filename))
      fail("{}: an onnxruntime-genai folder holds one model ({}); --variant {} does not apply", path, g.filename, variant);
    loc.model = (dir / g.filename).string();
    loc.layout = "genai";
    loc.variants = {variant_of(g.filename)};
    return loc;
  }
  fs::path where = dir;
  std::vector<std::string> files = onnx_files(dir);
  loc.layout = "folder";
  if (files.empty() && fs::is_directory(dir / "onnx", ec)) {
    where = dir / "onnx";
    files = onnx_files(where);
    loc.layout = "onnx/";
  }
  if (files.empty()) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      found.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
    std::sort(found.begin(), found.end());
    fail("{}: no model found: expected genai_config.json (onnxruntime-genai), model*.onnx, or onnx/model*.onnx "
         "(transformers.js); the folder holds {}",
         path, joined(found));
  }
  for (const std::string& f : files) loc.variants.push_back(variant_of(f));
  std::string pick;
  if (!variant.empty()) {
    for (const std::string& f : files)
      if (variant_of(f) == variant) pick = f;
    if (pick.empty())
      fail("{}: no variant '{}'; {} has {} (variants: {})", path, variant, where.string(), joined(files),
           joined(loc.variants));
  } else if (std::find(files.begin(), files.end(), "model-cached.onnx") != files.end()) {
    pick = "model-cached.onnx";  // scripts/export_onnx.py's pair: the one with a KV cache
  } else if (std::find(files.begin(), files.end(), "model.onnx") != files.end()) {
    pick = "model.onnx";
  } else if (files.size() == 1) {
    pick = files[0];
  } else {
    fail("{}: holds several models ({}); pick one with --variant {}", path, joined(files),
         joined(loc.variants));
  }
  loc.model = (where / pick).string();
  return loc;
}

ModelFiles read_model_files(const std::string& model_path, const std::string& side_dir) {
  ModelFiles f;
  const fs::path dir = side_dir.empty() ? fs::path(model_path).parent_path() : fs::path(side_dir);
  f.dir = dir.empty() ? "." : dir.string();
  const fs::path base(f.dir);
  if (fs::exists(base / "tokenizer.json")) f.tokenizer_path = (base / "tokenizer.json").string();

  if (fs::exists(base / "generation_config.json")) {
    JsonFile j(base / "generation_config.json");
    j.field("eos_token_id", [&](od::value v) { read_ids(v, f.eos_ids, j.path()); });
    if (read_sampling([&](std::string_view key, auto&& g) { j.field(key, g); }, f.sampling))
      f.sampling.sources.push_back(j.path());
  }
  if (fs::exists(base / "genai_config.json")) {
    // {"search": {"do_sample": ..., "temperature": ..., ...}}
    JsonFile j(base / "genai_config.json");
    bool any = false;
    j.field("search", [&](od::value search) {
      od::object obj;
      if (search.get_object().get(obj)) return;
      for (auto m : obj) {
        std::string_view k;
        od::value v;
        if (m.unescaped_key().get(k) || m.value().get(v)) fail("{}: not valid JSON in 'search'", j.path());
        const std::string key(k);
        any |= read_sampling(
            [&](std::string_view want, auto&& g) {
              if (key == want) g(v);
            },
            f.sampling);
      }
    });
    if (any) f.sampling.sources.push_back(j.path());
    f.genai = read_genai_config((base / "genai_config.json").string());
    if (f.eos_ids.empty()) {
      // model.eos_token_id: an int or a list.
      JsonFile m(base / "genai_config.json");
      m.field("model", [&](od::value model) {
        od::value v;
        if (!model["eos_token_id"].get(v)) read_ids(v, f.eos_ids, m.path());
      });
    }
    if (f.max_positions == 0 && f.genai.context_length > 0) {
      f.max_positions = f.genai.context_length;
      f.max_positions_from = "context_length in genai_config.json";
    }
  }
  if (fs::exists(base / "config.json")) {
    JsonFile j(base / "config.json");
    if (f.eos_ids.empty()) j.field("eos_token_id", [&](od::value v) { read_ids(v, f.eos_ids, j.path()); });
    j.field("max_position_embeddings", [&](od::value v) {
      int64_t n;
      if (!v.get_int64().get(n)) {
        f.max_positions = n;
        f.max_positions_from = "max_position_embeddings in config.json";
      }
    });
    j.field("model_type", [&](od::value v) {
      std::string_view s;
      if (!v.get_string().get(s)) f.model_type = std::string(s);
    });
    int64_t hidden = 0, heads = 0;
    const auto get = [&](const char* key, int64_t& out) {
      j.field(key, [&](od::value v) {
        int64_t n;
        if (!v.get_int64().get(n)) out = n;
      });
    };
    get("head_dim", f.head_dim);
    get("hidden_size", hidden);
    get("num_attention_heads", heads);
    get("num_key_value_heads", f.kv_heads);
    if (f.head_dim == 0 && hidden > 0 && heads > 0) f.head_dim = hidden / heads;
    if (f.kv_heads == 0) f.kv_heads = heads;
  }
  if (fs::exists(base / "tokenizer_config.json")) {
    JsonFile j(base / "tokenizer_config.json");
    j.field("eos_token", [&](od::value v) {
      std::string_view s;
      od::json_type type;
      if (v.type().get(type)) return;
      if (type == od::json_type::string && !v.get_string().get(s)) f.eos_tokens.emplace_back(s);
      if (type == od::json_type::object && !v["content"].get_string().get(s)) f.eos_tokens.emplace_back(s);
    });
    j.field("chat_template", [&](od::value v) {
      std::string_view s;
      if (!v.get_string().get(s)) f.chat_template = std::string(s);
    });
  }
  // transformers 5 writes the template to a file of its own.
  if (f.chat_template.empty() && fs::exists(base / "chat_template.jinja"))
    f.chat_template = read_text(base / "chat_template.jinja");
  return f;
}

}  // namespace onebit
