#include "graph/passes/passes.h"

#include "base/error.h"

namespace onebit {

// The order matters: the last-position cut first, while the LM head is
// still a plain MatMul (or DequantizeLinear -> MatMul); a transposed constant
// weight is handed to its MatMul before folding could copy it, and a
// float16 weight behind a Cast to its F16wMatMul before folding could widen it; folding next
// so fusions see constants; dead nodes after folding; the dtypes a file
// leaves out filled in for the fusions that check them (and, with them, a
// graph that computes in bfloat16 found: it runs no fusion); then the fusions,
// which match on constant weights; the dims read off a Reshape made
// constants after the RMS norm fusion (a Qwen3 q norm between the Reshape
// and the read) and folded again, before sdpa's split scale is written as
// the eager scale (transformers 4.x computes it from q.size(-1)), then the
// GQA fusion that needs that, and the rotary fusion that needs the halves'
// bounds constant; the KV state after the GQA fusion, whose nodes it
// re-points, and after those dims (the last live reader of a repeated
// cache); the mask handed to the scores after both (its GqaMatMul's inputs
// are final then), and the scores' scale, mask and Softmax taken into them
// after that, then the Slice that cut that mask to the keys; the dims read
// off shapes again once the KV state stands (a cache's heads and head size,
// which the repeat proofs of the GQA fusion needed to see as dims of the
// cache, not as numbers); the scores and their P·V in one node last, when
// the scores' chain and mask are final. Duplicate nodes are merged after the
// fusions, which take only values with one reader, as exported.
const std::vector<Pass>& pass_list() {
  static const std::vector<Pass> passes = {
      {"last-position-outputs", true, keep_last_position},
      {"matmul-transposed-weight", true, fuse_matmul_transpose},
      {"f16-weight-matmul", false, fuse_f16_weight_matmul},
      {"fold-constants", true, fold_constants},
      {"remove-dead-nodes", true, remove_dead_nodes},
      {"infer-dtypes", false, infer_dtypes},
      {"bf16-check", false, check_bf16},
      {"fuse-qdq-matmul", true, fuse_qdq_matmul},
      {"fuse-q4-matmul", false, fuse_q4_matmul},
      {"fuse-ort-dynamic-int8", false, fuse_ort_dynamic_int8},
      {"qd8-matmul", false, qd8_matmul},
      {"fuse-rms-norm", false, fuse_rms_norm},
      {"reshaped-dims", false, read_reshaped_dims},
      {"fold-constants", false, fold_constants},
      {"sdpa-scales", false, fold_sdpa_scales},
      {"fuse-gqa-matmul", false, fuse_gqa_matmul},
      {"split-attention", false, split_attention_products},
      {"fuse-mha-repeat-kv", false, fuse_mha_repeat_kv},
      {"fuse-rotary", false, fuse_rotary},
      {"fuse-swiglu", false, fuse_swiglu},
      {"kv-state", false, keep_kv_state},
      {"masked-scores", false, give_scores_their_mask},
      {"fuse-scores-softmax", false, fuse_scores_softmax},
      {"cut-mask-to-keys", false, cut_mask_to_keys},
      {"reshaped-dims", false, read_reshaped_dims},
      {"fuse-scores-mix", false, fuse_scores_mix},
      {"group-sibling-matmuls", false, group_sibling_matmuls},
      {"merge-duplicate-nodes", false, merge_duplicate_nodes},
      {"remove-dead-nodes", true, remove_dead_nodes},
  };
  return passes;
}

void run_passes(Graph& g, PassContext& ctx) {
  const auto& passes = pass_list();
  // The fusions' kernels take float32 and float16; a graph that computes in
  // bfloat16 (bf16-check) keeps to the --basic passes from there on, and its
  // ops run as the file writes them (each op's bfloat16 form).
  bool basic = ctx.options.basic;
  for (size_t i = 0; i < passes.size(); ++i) {
    if (ctx.options.stop_after_pass >= 0 && static_cast<int>(i) >= ctx.options.stop_after_pass) break;
    if (basic && !passes[i].basic) continue;
    const size_t before = g.nodes.size();
    with_context(fmt::format("pass {} ({})", i + 1, passes[i].name), [&] { passes[i].run(g, ctx); });
    ctx.report.log.push_back(fmt::format("pass {} {}: {} -> {} nodes", i + 1, passes[i].name, before, g.nodes.size()));
    if (!basic && ctx.report.get("bf16_unfused") > 0) {
      basic = true;
      ctx.report.log.push_back("bf16_unfused: the passes after this one run only if --basic would run them");
    }
  }
}

}  // namespace onebit
