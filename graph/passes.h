// Graph passes run in an ordered list; `stop_after_pass` cuts the list after
// pass N so a bad rewrite can be bisected (`1bit run --stop-after-pass N`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onebit {

class ThreadPool;

struct SessionOptions {
  int threads = 0;           // 0: the machine's cores
  int stop_after_pass = -1;  // -1: every pass; N: passes 0..N only
  bool basic = false;        // constant folding and QDQ fusion only (parity runs)
  bool qdq_fusion = true;    // ONEBIT_QDQ=0 turns it off (the control run)
  bool qdq_debug = false;    // ONEBIT_QDQ_DEBUG=1: log every group not fused
  bool int8 = false;         // --int8: dynamic int8 for float MatMuls with constant weights
  bool w4_fusion = true;     // DequantizeLinear(int4) -> MatMul into the Q4 GEMM; ONEBIT_W4=0 turns it off
  std::string act_precision = "auto";  // activations of the 4-bit GEMM: auto|int8-row|int8-block|float
  bool trace = false;        // ONEBIT_TRACE=1: log kernel choices
  bool profile = false;      // ONEBIT_PROFILE=1: time every kernel, by op type
  // Outputs whose last row along the sequence axis is all the caller reads
  // (the generator's logits): their LM head computes only that row.
  std::vector<std::string> last_position_outputs;
  // KV-cache inputs (`past`) of a caller that decodes one sequence and does
  // not feed `present` back: the session keeps the cache itself and appends
  // in place (graph/kv_state.cpp). `1bit run` names none.
  std::vector<std::string> kv_state_inputs;
  bool kv_state = true;  // ONEBIT_KV_STATE=0 keeps the exported Concats (control runs)

  // Reads ONEBIT_QDQ, ONEBIT_QDQ_DEBUG, ONEBIT_W4, ONEBIT_KV_STATE, ONEBIT_TRACE, ONEBIT_PROFILE from the
  // environment.
  static SessionOptions from_env();
};

// What the passes did, for logs, `inspect` and tests.
struct PassReport {
  std::vector<std::string> log;           // human-readable lines, in order
  std::map<std::string, int64_t> counts;  // e.g. "qdq_fused" -> 197
  void count(const std::string& key, int64_t n = 1) { counts[key] += n; }
  int64_t get(const std::string& key) const {
    auto it = counts.find(key);
    return it == counts.end() ? 0 : it->second;
  }
};

struct Pass {
  const char* name;
  bool basic;  // part of the --basic set
  void (*run)(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
};

// The ordered pass list.
const std::vector<Pass>& pass_list();

// Runs the passes `options` selects, in order.
void run_passes(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);

// Individual passes (each in its own file).
void fold_constants(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void remove_dead_nodes(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void keep_last_position(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);
void keep_kv_state(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool);

// Per node: whether any of its outputs reaches a graph output (in topological
// order). `live_values`, if given, receives the same per value.
std::vector<bool> live_nodes(const Graph& g, std::vector<bool>* live_values = nullptr);

}  // namespace onebit
