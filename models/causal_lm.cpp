#include "models/causal_lm.h"

#include <fmt/format.h>

#include <map>
#include <regex>

#include "base/error.h"

namespace onebit {

namespace {

std::string io_list(const Graph& g, const std::vector<int>& ids) {
  std::string s;
  for (int v : ids) {
    const Value& val = g.value(v);
    std::string dims = "?";
    if (val.has_shape) {
      dims = "[";
      for (size_t i = 0; i < val.dims.size(); ++i)
        dims += (i ? "," : "") + (val.dims[i].value >= 0 ? std::to_string(val.dims[i].value)
                                                         : (val.dims[i].param.empty() ? "?" : val.dims[i].param));
      dims += "]";
    }
    s += fmt::format("\n    {} {} {}", val.name, dtype_name(val.dtype), dims);
  }
  return s;
}

const Value* find_io(const Graph& g, const std::vector<int>& ids, const std::string& name) {
  for (int v : ids)
    if (g.value(v).name == name) return &g.value(v);
  return nullptr;
}

int64_t fixed_dim(const Value& v, size_t d) {
  return v.has_shape && d < v.dims.size() ? v.dims[d].value : -1;
}

}  // namespace

namespace {

std::string layer_name(const std::string& pattern, int64_t layer) {
  const size_t at = pattern.find("%d");
  return pattern.substr(0, at) + std::to_string(layer) + pattern.substr(at + 2);
}

}  // namespace

CausalLmBinding bind_causal_lm(const Graph& g, const ModelFiles* files) {
  const GenaiConfig* genai = files ? &files->genai : nullptr;
  auto explain = [&](const std::string& why) -> Error {
    return Error(fmt::format("{}: not a causal LM graph 1bit can drive: {}\n  inputs:{}\n  outputs:{}\n"
                             "  expected input_ids [batch, seq] int64, optional attention_mask / position_ids, an "
                             "optional cache (past -> present stacked, or past_key_values.N.key/value -> "
                             "present.N.key/value), and logits [batch, seq, vocab]",
                             g.path, why, io_list(g, g.inputs), io_list(g, g.outputs)));
  };
  CausalLmBinding b;
  const bool named = genai && genai->present;
  const auto name_or = [&](const std::string& given, const char* dflt) { return named && !given.empty() ? given : dflt; };
  const std::string ids_name = name_or(genai ? genai->input_ids : "", "input_ids");
  const Value* ids = find_io(g, g.inputs, ids_name);
  // A name not found, and why when the graph has onnxruntime-genai's
  // replacement for it (exclude_embeds, exclude_lm_head: the decoder of a
  // pipeline that embeds or projects outside it).
  const auto missing = [&](const char* io, const std::string& name, const std::vector<int>& ids_of,
                           const char* instead, const char* why) {
    return explain(fmt::format("no {} named {}{}", io, name,
                               find_io(g, ids_of, instead) ? fmt::format(" ({})", why) : std::string()));
  };
  if (!ids)
    throw missing("input", ids_name, g.inputs, "inputs_embeds",
                  "it takes inputs_embeds: a decoder fed embeddings computed outside it, as onnxruntime-genai's "
                  "exclude_embeds builds it; 1bit feeds token ids");
  if (ids->dtype != DType::I64 && ids->dtype != DType::I32) throw explain("input_ids is not int64 or int32");
  b.input_ids = ids->name;
  b.ids_dtype = ids->dtype;
  if (const Value* m = find_io(g, g.inputs, name_or(genai ? genai->attention_mask : "", "attention_mask"))) {
    b.attention_mask = m->name;
    b.mask_dtype = m->dtype == DType::Undefined ? DType::I64 : m->dtype;
  }
  if (const Value* p = find_io(g, g.inputs, name_or(genai ? genai->position_ids : "", "position_ids"))) {
    b.position_ids = p->name;
    b.positions_dtype = p->dtype == DType::Undefined ? DType::I64 : p->dtype;
  }
  const std::string logits_name = name_or(genai ? genai->logits : "", "logits");
  const Value* logits = find_io(g, g.outputs, logits_name);
  if (!logits)
    throw missing("output", logits_name, g.outputs, "hidden_states",
                  "it returns hidden_states: a decoder without its LM head, as onnxruntime-genai's exclude_lm_head "
                  "builds it; 1bit picks tokens from logits");
  if (logits->has_shape && logits->dims.size() != 3) throw explain("logits is not [batch, seq, vocab]");
  b.logits = logits->name;

  const Value* past = find_io(g, g.inputs, "past");
  const Value* present = find_io(g, g.outputs, "present");
  if (past || present) {
    if (!past || !present) throw explain("a stacked cache needs both 'past' and 'present'");
    if (!past->has_shape || past->dims.size() != 5) throw explain("past is not [2*layers, 1, kv_heads, past, head_dim]");
    b.cache = CausalLmBinding::Cache::Stacked;
    b.past_inputs = {past->name};
    b.present_outputs = {present->name};
    b.cache_dtype = past->dtype == DType::Undefined ? DType::F32 : past->dtype;
    const int64_t two_l = fixed_dim(*past, 0);
    b.kv_heads = fixed_dim(*past, 2);
    b.head_dim = fixed_dim(*past, 4);
    if (two_l <= 0 || two_l % 2 != 0 || b.kv_heads <= 0 || b.head_dim <= 0)
      throw explain("past must declare fixed 2*layers, kv_heads and head_dim dims");
    b.layers = two_l / 2;
    return b;
  }

  std::map<int64_t, std::pair<const Value*, const Value*>> layers;
  if (named && !genai->past_key_names.empty()) {
    // genai_config.json's patterns, layer by layer.
    if (genai->past_value_names.empty() || genai->present_key_names.empty() || genai->present_value_names.empty())
      throw explain(fmt::format("{} names past keys but not all of past values, present keys and present values",
                                genai->path));
    for (int64_t layer = 0;; ++layer) {
      const Value* k = find_io(g, g.inputs, layer_name(genai->past_key_names, layer));
      const Value* v = find_io(g, g.inputs, layer_name(genai->past_value_names, layer));
      if (!k && !v) break;
      if (!k || !v) throw explain(fmt::format("layer {} lacks its key or value ({})", layer, genai->path));
      for (auto [in, pattern] : {std::pair{k, &genai->present_key_names}, std::pair{v, &genai->present_value_names}}) {
        const std::string out = layer_name(*pattern, layer);
        if (!find_io(g, g.outputs, out))
          throw explain(fmt::format("'{}' has no matching output '{}' ({})", in->name, out, genai->path));
        b.past_inputs.push_back(in->name);
        b.present_outputs.push_back(out);
      }
      layers[layer] = {k, v};
    }
    if (layers.empty()) throw explain(fmt::format("no input '{}' ({})", layer_name(genai->past_key_names, 0), genai->path));
    if (genai->layers > 0 && static_cast<int64_t>(layers.size()) != genai->layers)
      throw explain(fmt::format("{} has {} layers, the graph {}", genai->path, genai->layers, layers.size()));
  }
  // Per layer (Optimum's names): past_key_values.N.key / .value.
  static const std::regex kPast(R"(past_key_values\.(\d+)\.(key|value))");
  for (int v : layers.empty() ? g.inputs : std::vector<int>{}) {
    const Value& val = g.value(v);
    std::smatch m;
    if (!std::regex_match(val.name, m, kPast)) continue;
    auto& slot = layers[std::stoll(m[1])];
    (m[2] == "key" ? slot.first : slot.second) = &val;
  }
  if (layers.empty()) return b;
  int64_t expect = 0;
  for (const auto& [layer, kv] : b.past_inputs.empty() ? layers : decltype(layers){}) {
    if (layer != expect) throw explain(fmt::format("past_key_values.{} is missing", expect));
    if (!kv.first || !kv.second) throw explain(fmt::format("layer {} lacks its key or value", layer));
    for (const Value* in : {kv.first, kv.second}) {
      const std::string out = "present" + in->name.substr(std::string("past_key_values").size());
      if (!find_io(g, g.outputs, out)) throw explain(fmt::format("'{}' has no matching output '{}'", in->name, out));
      b.past_inputs.push_back(in->name);
      b.present_outputs.push_back(out);
    }
    ++expect;
  }
  const Value& k0 = *layers.begin()->second.first;
  if (!k0.has_shape || k0.dims.size() != 4) throw explain("past_key_values.0.key is not [batch, kv_heads, past, head_dim]");
  b.cache = CausalLmBinding::Cache::PerLayer;
  b.cache_dtype = k0.dtype == DType::Undefined ? DType::F32 : k0.dtype;
  b.layers = static_cast<int64_t>(layers.size());
  b.kv_heads = fixed_dim(k0, 1);
  b.head_dim = fixed_dim(k0, 3);
  // genai builds leave the head size symbolic (kv_cache_dim); their config, or config.json, has it.
  if (named && b.kv_heads <= 0) b.kv_heads = genai->kv_heads;
  if (named && b.head_dim <= 0) b.head_dim = genai->head_size;
  if (files && b.kv_heads <= 0) b.kv_heads = files->kv_heads;
  if (files && b.head_dim <= 0) b.head_dim = files->head_dim;
  if (b.kv_heads <= 0 || b.head_dim <= 0)
    throw explain(fmt::format("{} must declare fixed kv_heads and head_dim (or genai_config.json / config.json "
                              "give num_key_value_heads and head_size / head_dim)",
                              k0.name));
  return b;
}

std::string describe(const CausalLmBinding& b) {
  std::string cache = "none";
  if (b.cache == CausalLmBinding::Cache::Stacked)
    cache = fmt::format("stacked '{}' -> '{}'", b.past_inputs[0], b.present_outputs[0]);
  if (b.cache == CausalLmBinding::Cache::PerLayer) cache = fmt::format("per layer ({} tensors)", b.past_inputs.size());
  return fmt::format("ids '{}'{}{}, logits '{}', cache {}{}", b.input_ids,
                     b.attention_mask.empty() ? "" : ", mask '" + b.attention_mask + "'",
                     b.position_ids.empty() ? "" : ", positions '" + b.position_ids + "'", b.logits, cache,
                     b.cache == CausalLmBinding::Cache::None
                         ? ""
                         : fmt::format(" ({} layers, {} kv heads, head dim {})", b.layers, b.kv_heads, b.head_dim));
}

}  // namespace onebit
