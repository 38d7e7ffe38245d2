// Graph passes run in an ordered list (passes.cpp); `stop_after_pass` cuts
// the list before pass N so a bad rewrite can be bisected (`1bit run
// --stop-after-pass N`). One file per pass in this folder; fusions share one
// scan / refuse / report loop (fusion.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/session_options.h"

namespace onebit {

class OpRegistry;
class ThreadPool;

// What the passes did, for logs, `inspect` and tests.
struct PassReport {
  std::vector<std::string> log;           // human-readable lines, in order
  std::map<std::string, int64_t> counts;  // e.g. "qdq_fused" -> 197
  std::vector<std::string> notes;         // for the user: ort-run, chat and bench print them (not --quiet)
  void count(const std::string& key, int64_t n = 1) { counts[key] += n; }
  int64_t get(const std::string& key) const {
    auto it = counts.find(key);
    return it == counts.end() ? 0 : it->second;
  }
};

// What a pass may use besides the graph it rewrites.
struct PassContext {
  const SessionOptions& options;
  const OpRegistry& registry;  // folding runs kernels
  PassReport& report;
  ThreadPool& pool;
};

using PassFn = void (*)(Graph& g, PassContext& ctx);

struct Pass {
  const char* name;
  bool basic;  // part of the --basic set
  PassFn run;
};

// The ordered pass list.
const std::vector<Pass>& pass_list();

// Runs the passes `ctx.options` selects, in order.
void run_passes(Graph& g, PassContext& ctx);

// The passes, each in its own file.
void keep_last_position(Graph& g, PassContext& ctx);    // last_position.cpp
void fuse_matmul_transpose(Graph& g, PassContext& ctx);  // matmul_transpose.cpp
void fold_constants(Graph& g, PassContext& ctx);         // fold_constants.cpp
void remove_dead_nodes(Graph& g, PassContext& ctx);      // dead_nodes.cpp
void infer_dtypes(Graph& g, PassContext& ctx);           // infer_dtypes.cpp
void check_bf16(Graph& g, PassContext& ctx);             // bf16_check.cpp
void fuse_qdq_matmul(Graph& g, PassContext& ctx);        // qdq_fusion.cpp
void fuse_q4_matmul(Graph& g, PassContext& ctx);         // q4_fusion.cpp
void qd8_matmul(Graph& g, PassContext& ctx);             // qd8_matmul.cpp
void fuse_ort_dynamic_int8(Graph& g, PassContext& ctx);  // ort_dynamic_int8.cpp
void fuse_f16_weight_matmul(Graph& g, PassContext& ctx); // f16_weight_matmul.cpp
void fold_sdpa_scales(Graph& g, PassContext& ctx);       // sdpa_scales.cpp
void fuse_gqa_matmul(Graph& g, PassContext& ctx);        // gqa_fusion.cpp
void split_attention_products(Graph& g, PassContext& ctx);  // gqa_fusion.cpp
void fuse_mha_repeat_kv(Graph& g, PassContext& ctx);     // mha_repeat_kv.cpp
void fuse_rms_norm(Graph& g, PassContext& ctx);          // rms_norm_fusion.cpp
void fuse_rotary(Graph& g, PassContext& ctx);            // rotary_fusion.cpp
void fuse_swiglu(Graph& g, PassContext& ctx);            // swiglu_fusion.cpp
void read_reshaped_dims(Graph& g, PassContext& ctx);     // reshaped_dims.cpp
void keep_kv_state(Graph& g, PassContext& ctx);          // kv_state.cpp
void give_scores_their_mask(Graph& g, PassContext& ctx);  // masked_scores.cpp
void fuse_scores_softmax(Graph& g, PassContext& ctx);     // masked_scores.cpp
void cut_mask_to_keys(Graph& g, PassContext& ctx);        // masked_scores.cpp
void fuse_scores_mix(Graph& g, PassContext& ctx);         // scores_mix.cpp
void group_sibling_matmuls(Graph& g, PassContext& ctx);  // sibling_matmul.cpp
void merge_duplicate_nodes(Graph& g, PassContext& ctx);  // merge_duplicates.cpp

// Per node: whether any of its outputs reaches a graph output (in topological
// order). `live_values`, if given, receives the same per value.
std::vector<bool> live_nodes(const Graph& g, std::vector<bool>* live_values = nullptr);

}  // namespace onebit
