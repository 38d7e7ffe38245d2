#include "graph/passes.h"

#include <cstdlib>
#include <cstring>

#include "graph/error.h"
#include "graph/fusions.h"

namespace onebit {

namespace {
bool env_flag(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0 || std::strcmp(v, "off") == 0);
}
}  // namespace

SessionOptions SessionOptions::from_env() {
  SessionOptions o;
  o.qdq_fusion = env_flag("ONEBIT_QDQ", true);
  o.qdq_debug = env_flag("ONEBIT_QDQ_DEBUG", false);
  o.w4_fusion = env_flag("ONEBIT_W4", true);
  o.kv_state = env_flag("ONEBIT_KV_STATE", true);
  o.trace = env_flag("ONEBIT_TRACE", false);
  o.profile = env_flag("ONEBIT_PROFILE", false);
  return o;
}

// The order matters: the last-position cut first, while the LM head is
// still a plain MatMul (or DequantizeLinear -> MatMul); a transposed constant weight is handed to its MatMul
// before folding could copy it; folding next so fusions see constants;
// dead nodes after folding; then the fusions, which match on constant
// weights; the KV state after the GQA fusion, whose nodes it re-points.
const std::vector<Pass>& pass_list() {
  static const std::vector<Pass> passes = {
      {"last-position-outputs", true, keep_last_position},
      {"matmul-transposed-weight", true, fuse_matmul_transpose},
      {"fold-constants", true, fold_constants},
      {"remove-dead-nodes", true, remove_dead_nodes},
      {"fuse-qdq-matmul", true, fuse_qdq_matmul},
      {"fuse-w4-matmul", false, fuse_w4_matmul},
      {"int8-dynamic-matmul", false, int8_dynamic_matmul},
      {"fuse-gqa-matmul", false, fuse_gqa_matmul},
      {"fuse-rms-norm", false, fuse_rms_norm},
      {"fuse-rotary", false, fuse_rotary},
      {"kv-state", false, keep_kv_state},
      {"remove-dead-nodes", true, remove_dead_nodes},
  };
  return passes;
}

void run_passes(Graph& g, const SessionOptions& options, PassReport& report, ThreadPool& pool) {
  const auto& passes = pass_list();
  for (size_t i = 0; i < passes.size(); ++i) {
    if (options.stop_after_pass >= 0 && static_cast<int>(i) >= options.stop_after_pass) break;
    if (options.basic && !passes[i].basic) continue;
    const size_t before = g.nodes.size();
    with_context(fmt::format("pass {} ({})", i + 1, passes[i].name), [&] { passes[i].run(g, options, report, pool); });
    report.log.push_back(fmt::format("pass {} {}: {} -> {} nodes", i + 1, passes[i].name, before, g.nodes.size()));
  }
}

}  // namespace onebit
