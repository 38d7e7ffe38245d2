// Causal-LM binding: which graph inputs are the token ids, the attention mask,
// the positions and the KV cache, and which output is the logits. Found by
// the conventions exporters use:
//   input_ids [batch, seq] int64                      (required)
//   attention_mask [batch, past + seq], position_ids [batch, seq]   (if present)
//   cache, stacked:   past [2*layers, 1, kv_heads, past, head_dim] -> present
//   cache, per layer: past_key_values.N.key / .value -> present.N.key / .value
//   logits [batch, seq, vocab]                        (the last position is used)
// or by the names genai_config.json gives (onnxruntime-genai's builds:
// past_key_values.%d.key -> present.%d.key, head size and KV heads there
// when the graph leaves them symbolic).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor.h"
#include "models/model_files.h"

namespace onebit {

struct CausalLmBinding {
  enum class Cache { None, Stacked, PerLayer };

  std::string input_ids;
  std::string attention_mask;  // empty when the graph has none
  std::string position_ids;    // empty when the graph has none
  std::string logits;
  Cache cache = Cache::None;
  // Stacked: one pair. Per layer: key then value for each layer, in order.
  std::vector<std::string> past_inputs;
  std::vector<std::string> present_outputs;
  DType cache_dtype = DType::F32;
  int64_t layers = 0, kv_heads = 0, head_dim = 0;  // from the declared cache dims
  DType ids_dtype = DType::I64;
  DType mask_dtype = DType::I64;
  DType positions_dtype = DType::I64;
};

// Throws an Error listing the graph's inputs and outputs when they fit none of
// the conventions.
// `files` (optional): genai_config.json's names, and the cache geometry of
// genai_config.json or config.json where the graph leaves it symbolic.
CausalLmBinding bind_causal_lm(const Graph& g, const ModelFiles* files = nullptr);

std::string describe(const CausalLmBinding& b);

}  // namespace onebit
