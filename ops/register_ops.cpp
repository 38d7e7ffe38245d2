#include "ops/register_ops.h"

#include "graph/op_registry.h"

namespace onebit {

void register_all_ops(OpRegistry& r) {
  register_binary_ops(r);
  register_shape_ops(r);
  register_transpose_op(r);
  register_slice_op(r);
  register_expand_tile_ops(r);
  register_concat_split_ops(r);
  register_gather_ops(r);
  register_scatter_ops(r);
  register_pad_op(r);
  register_unary_ops(r);
  register_activation_ops(r);
  register_variadic_ops(r);
  register_cast_ops(r);
  register_reduce_ops(r);
  register_softmax_ops(r);
  register_layer_norm_ops(r);
  register_quantize_ops(r);
  register_misc_ops(r);
  register_control_flow_ops(r);
  register_topk_op(r);
  register_einsum_op(r);
  register_matmul_ops(r);
  register_gemm_ops(r);
  register_matmul_integer_ops(r);
  register_qdq_matmul_op(r);
  register_qd8_matmul_op(r);
  register_gqa_matmul_op(r);
  register_kv_append_op(r);
  register_rms_norm_op(r);
  register_rotary_op(r);
  register_swiglu_op(r);
  register_q4_matmul_ops(r);
  register_matmul_bnb4_op(r);
  register_group_query_attention_ops(r);
  register_simplified_layer_norm_ops(r);
  register_gather_block_quantized_op(r);
  register_attention_op(r);
  register_f16w_matmul_op(r);
}

const OpRegistry& default_op_registry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_all_ops(r);
    return r;
  }();
  return registry;
}

}  // namespace onebit
