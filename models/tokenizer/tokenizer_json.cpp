// Tokenizer::load: tokenizer.json -> Tokenizer::Impl. simdjson types stay in
// this file. Every error names the JSON path it found wrong
// ("model.merges[12]"); load() prefixes the file name.
#include <simdjson.h>

#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "base/text_file.h"
#include "models/tokenizer/tokenizer_impl.h"

namespace onebit {

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

const char* type_name(element e) {
  switch (e.type()) {
    case element_type::ARRAY: return "an array";
    case element_type::OBJECT: return "an object";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: return "a number";
    case element_type::STRING: return "a string";
    case element_type::BOOL: return "a boolean";
    case element_type::NULL_VALUE: return "null";
  }
  return "an unknown JSON value";
}

object as_object(element e, const std::string& path) {
  object o;
  if (e.get_object().get(o)) fail("{}: expected an object, got {}", path, type_name(e));
  return o;
}

array as_array(element e, const std::string& path) {
  array a;
  if (e.get_array().get(a)) fail("{}: expected an array, got {}", path, type_name(e));
  return a;
}

std::string as_string(element e, const std::string& path) {
  std::string_view s;
  if (e.get_string().get(s)) fail("{}: expected a string, got {}", path, type_name(e));
  return std::string(s);
}

bool as_bool(element e, const std::string& path) {
  bool b;
  if (e.get_bool().get(b)) fail("{}: expected true or false, got {}", path, type_name(e));
  return b;
}

int32_t as_id(element e, const std::string& path) {
  int64_t v;
  if (e.get_int64().get(v)) fail("{}: expected an integer id, got {}", path, type_name(e));
  if (v < 0 || v > INT32_MAX) fail("{}: id {} is out of range", path, v);
  return static_cast<int32_t>(v);
}

// A member that is absent or null gives nullopt.
std::optional<element> member(object o, const char* key) {
  element e;
  if (o.at_key(key).get(e) || e.is_null()) return std::nullopt;
  return e;
}

element required(object o, const char* key, const std::string& path) {
  auto e = member(o, key);
  if (!e) fail("{}: missing \"{}\"", path, key);
  return *e;
}

bool flag(object o, const char* key, const std::string& path, bool fallback) {
  const auto e = member(o, key);
  return e ? as_bool(*e, path + "." + key) : fallback;
}

std::optional<std::string> optional_string(object o, const char* key, const std::string& path) {
  const auto e = member(o, key);
  if (!e) return std::nullopt;
  return as_string(*e, path + "." + key);
}

std::string type_of(object o, const std::string& path) { return as_string(required(o, "type", path), path + ".type"); }

std::string index_path(const std::string& path, size_t i) { return fmt::format("{}[{}]", path, i); }

// ---- normalizer ----

void parse_normalizer(element e, const std::string& path, Normalizer& out) {
  const object o = as_object(e, path);
  const std::string type = type_of(o, path);
  if (type == "NFC") return out.add(NormalForm::NFC);
  if (type == "NFD") return out.add(NormalForm::NFD);
  if (type == "NFKC") return out.add(NormalForm::NFKC);
  if (type == "NFKD") return out.add(NormalForm::NFKD);
  if (type == "Sequence") {
    const std::string list = path + ".normalizers";
    size_t i = 0;
    for (element child : as_array(required(o, "normalizers", path), list))
      parse_normalizer(child, index_path(list, i++), out);
    return;
  }
  fail("{}: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", path, type);
}

// ---- pre_tokenizer ----

SplitBehavior parse_behavior(const std::string& name, const std::string& path) {
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::Removed},
      {"Isolated", SplitBehavior::Isolated},
      {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
      {"MergedWithNext", SplitBehavior::MergedWithNext},
      {"Contiguous", SplitBehavior::Contiguous},
  };
  for (const auto& [n, b] : kNames) {
    if (name == n) return b;
  }
  fail("{}: unknown split behavior '{}' (expected one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
       "Contiguous)", path, name);
}

void parse_pre_tokenizer(element e, const std::string& path, PreTokenizer& out) {
  const object o = as_object(e, path);
  const std::string type = type_of(o, path);
  if (type == "Sequence") {
    const std::string list = path + ".pretokenizers";
    size_t i = 0;
    for (element child : as_array(required(o, "pretokenizers", path), list)) {
      parse_pre_tokenizer(child, index_path(list, i++), out);
    }
    return;
  }
  if (type == "ByteLevel") {
    // Defaults are HF's ByteLevel::default().
    out.add_byte_level({flag(o, "add_prefix_space", path, true), flag(o, "use_regex", path, true)});
    return;
  }
  if (type == "Split") {
    const std::string pattern_path = path + ".pattern";
    const object pattern = as_object(required(o, "pattern", path), pattern_path);
    SplitStep step;
    if (const auto regex = optional_string(pattern, "Regex", pattern_path)) {
      step.pattern = with_context(pattern_path, [&] { return Regex::compile(*regex); });
    } else if (const auto literal = optional_string(pattern, "String", pattern_path)) {
      step.pattern = Regex::literal(*literal);
    } else {
      fail("{}: expected {{\"Regex\": ...}} or {{\"String\": ...}}", pattern_path);
    }
    step.behavior = parse_behavior(as_string(required(o, "behavior", path), path + ".behavior"), path + ".behavior");
    step.invert = flag(o, "invert", path, false);
    out.add_split(std::move(step));
    return;
  }
  fail("{}: pre-tokenizer type '{}' is not supported (supported: Split, ByteLevel, Sequence)", path, type);
}

// ---- model ----

std::pair<std::string, std::string> parse_merge(element e, const std::string& path) {
  if (e.type() == element_type::STRING) {
    // "a b": exactly one space, as HF's convert_merges_to_hashmap requires.
    const std::string s = as_string(e, path);
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      fail("{}: merge \"{}\" is not two tokens separated by one space", path, s);
    }
    return {s.substr(0, space), s.substr(space + 1)};
  }
  const array pair = as_array(e, path);
  if (pair.size() != 2) fail("{}: a merge must have 2 tokens, got {}", path, pair.size());
  return {as_string(pair.at(0), path + "[0]"), as_string(pair.at(1), path + "[1]")};
}

Bpe parse_model(element e, const std::string& path) {
  const object o = as_object(e, path);
  const auto type = optional_string(o, "type", path);
  // Files written before models carried a type are BPE when they have merges.
  if (type ? *type != "BPE" : !member(o, "merges")) {
    fail("{}: model type '{}' is not supported (only BPE)", path, type.value_or("(none)"));
  }
  BpeConfig config;
  const std::string vocab_path = path + ".vocab";
  const object vocab = as_object(required(o, "vocab", path), vocab_path);
  config.vocab.reserve(vocab.size());
  for (const auto field : vocab) {
    const std::string key(field.key);
    config.vocab.emplace_back(key, as_id(field.value, fmt::format("{}[\"{}\"]", vocab_path, key)));
  }
  const std::string merges_path = path + ".merges";
  const array merges = as_array(required(o, "merges", path), merges_path);
  config.merges.reserve(merges.size());
  size_t i = 0;
  for (element m : merges) config.merges.push_back(parse_merge(m, index_path(merges_path, i++)));

  if (member(o, "dropout")) {
    fail("{}.dropout: BPE dropout samples merges at random and is not supported", path);
  }
  config.unk_token = optional_string(o, "unk_token", path);
  config.continuing_subword_prefix = optional_string(o, "continuing_subword_prefix", path).value_or("");
  config.end_of_word_suffix = optional_string(o, "end_of_word_suffix", path).value_or("");
  config.fuse_unk = flag(o, "fuse_unk", path, false);
  config.byte_fallback = flag(o, "byte_fallback", path, false);
  config.ignore_merges = flag(o, "ignore_merges", path, false);
  return with_context(path, [&] { return Bpe(std::move(config)); });
}

// ---- added tokens ----

std::vector<AddedToken> parse_added_tokens(element e, const std::string& path) {
  std::vector<AddedToken> tokens;
  size_t i = 0;
  for (element item : as_array(e, path)) {
    const std::string p = index_path(path, i++);
    const object o = as_object(item, p);
    AddedToken t;
    t.id = as_id(required(o, "id", p), p + ".id");
    t.content = as_string(required(o, "content", p), p + ".content");
    t.special = flag(o, "special", p, false);
    t.single_word = flag(o, "single_word", p, false);
    t.lstrip = flag(o, "lstrip", p, false);
    t.rstrip = flag(o, "rstrip", p, false);
    t.normalized = flag(o, "normalized", p, !t.special);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

// HF ignores the ids written in "added_tokens": a token already in the model
// vocabulary takes that id, any other the next id after the model's
// (AddedVocabulary::add_tokens). Doing the same keeps ids identical to HF's.
std::vector<AddedToken> assign_ids(std::vector<AddedToken> tokens, const Bpe& model) {
  std::vector<AddedToken> out;
  std::unordered_map<std::string, size_t> by_content;
  int64_t max_added = -1;
  const auto model_size = static_cast<int64_t>(model.size());
  for (AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    int32_t id = -1;
    const auto seen = by_content.find(t.content);
    if (seen != by_content.end()) {
      id = out[seen->second].id;
    } else {
      id = model.token_to_id(t.content);
    }
    if (id < 0) {
      id = static_cast<int32_t>(max_added >= model_size || model_size == 0 ? max_added + 1 : model_size);
    }
    max_added = std::max<int64_t>(max_added, id);
    t.id = id;
    if (seen != by_content.end()) {
      out[seen->second] = std::move(t);  // a repeated token takes the later options
    } else {
      by_content.emplace(t.content, out.size());
      out.push_back(std::move(t));
    }
  }
  return out;
}

// ---- post_processor and decoder ----

void parse_post_processor(element e, const std::string& path, std::vector<TemplatePiece>& out) {
  const object o = as_object(e, path);
  const std::string type = type_of(o, path);
  if (type == "ByteLevel") return;  // only moves offsets
  if (type == "Sequence") {
    const std::string list = path + ".processors";
    size_t i = 0;
    for (element child : as_array(required(o, "processors", path), list)) {
      parse_post_processor(child, index_path(list, i++), out);
    }
    return;
  }
  if (type != "TemplateProcessing") {
    fail("{}: post-processor type '{}' is not supported (supported: ByteLevel, TemplateProcessing, Sequence)", path,
         type);
  }
  if (!out.empty()) fail("{}: more than one TemplateProcessing", path);
  const std::string specials_path = path + ".special_tokens";
  const auto specials = member(o, "special_tokens");
  const std::string single_path = path + ".single";
  size_t i = 0;
  for (element item : as_array(required(o, "single", path), single_path)) {
    const std::string p = index_path(single_path, i++);
    const object piece = as_object(item, p);
    if (const auto sequence = member(piece, "Sequence")) {
      const std::string id = as_string(required(as_object(*sequence, p + ".Sequence"), "id", p + ".Sequence"), p);
      if (id != "A") fail("{}: the single template can only hold sequence A, got '{}'", p, id);
      out.push_back({true, {}});
    } else if (const auto special = member(piece, "SpecialToken")) {
      const std::string sp = p + ".SpecialToken";
      const std::string id = as_string(required(as_object(*special, sp), "id", sp), sp + ".id");
      if (!specials) fail("{}: refers to special token '{}' but there is no special_tokens map", sp, id);
      const auto entry = member(as_object(*specials, specials_path), id.c_str());
      if (!entry) fail("{}: special token '{}' is not in {}", sp, id, specials_path);
      const std::string ep = specials_path + "." + id;
      TemplatePiece t;
      size_t k = 0;
      for (element v : as_array(required(as_object(*entry, ep), "ids", ep), ep + ".ids")) {
        t.ids.push_back(as_id(v, index_path(ep + ".ids", k++)));
      }
      out.push_back(std::move(t));
    } else {
      fail("{}: expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}", p);
    }
  }
}

DecoderKind parse_decoder(element e, const std::string& path) {
  const object o = as_object(e, path);
  const std::string type = type_of(o, path);
  if (type == "ByteLevel") return DecoderKind::ByteLevel;
  if (type == "Sequence") {
    const std::string list = path + ".decoders";
    const array decoders = as_array(required(o, "decoders", path), list);
    // ByteLevel turns the token list into one string; nothing after it would
    // see tokens, so only a lone ByteLevel makes sense here.
    if (decoders.size() != 1) fail("{}: only a Sequence holding one ByteLevel decoder is supported", path);
    return parse_decoder(decoders.at(0), index_path(list, 0));
  }
  fail("{}: decoder type '{}' is not supported (supported: ByteLevel, Sequence)", path, type);
}

std::shared_ptr<Tokenizer::Impl> parse_root(element root) {
  const object o = as_object(root, "top level");
  for (const char* key : {"truncation", "padding"}) {
    if (member(o, key)) fail("{}: is set; truncation and padding change the ids and are not supported", key);
  }
  auto impl = std::make_shared<Tokenizer::Impl>();
  if (const auto n = member(o, "normalizer")) parse_normalizer(*n, "normalizer", impl->normalizer);
  if (const auto p = member(o, "pre_tokenizer")) parse_pre_tokenizer(*p, "pre_tokenizer", impl->pre_tokenizer);
  impl->model.emplace(parse_model(required(o, "model", "top level"), "model"));
  if (const auto p = member(o, "post_processor")) parse_post_processor(*p, "post_processor", impl->post_template);
  if (const auto d = member(o, "decoder")) impl->decoder = parse_decoder(*d, "decoder");

  std::vector<AddedToken> added;
  if (const auto a = member(o, "added_tokens")) added = parse_added_tokens(*a, "added_tokens");
  added = assign_ids(std::move(added), *impl->model);
  impl->max_id = impl->model->max_id();
  for (const AddedToken& t : added) impl->max_id = std::max(impl->max_id, t.id);
  const Normalizer& normalizer = impl->normalizer;
  impl->added.build(std::move(added), [&](const std::string& s) { return normalizer.apply(s); });
  return impl;
}

}  // namespace

Tokenizer Tokenizer::parse(std::string_view json, const std::string& name) {
  return with_context(name, [&] {
    simdjson::dom::parser parser;
    const simdjson::padded_string padded(json);
    element root;
    if (const auto error = parser.parse(padded).get(root)) fail("not valid JSON: {}", simdjson::error_message(error));
    auto impl = parse_root(root);
    impl->path = name;
    return Tokenizer(std::move(impl));
  });
}

Tokenizer Tokenizer::load(const std::string& path) {
  // The largest real tokenizer.json files are tens of megabytes (Gemma's
  // 256k-token vocabulary: ~33 MB); past this bound a file is refused, not
  // read into memory.
  constexpr size_t kMaxTokenizerBytes = size_t{512} << 20;
  return parse(read_text_file(path, kMaxTokenizerBytes, "tokenizer"), path);
}

}  // namespace onebit
