// Every op file exposes one register function; register_all_ops calls them
// all, so the table is explicit (no static initialisers a linker may drop).
// default_op_registry() is that table, built once: what sessions are given.
#pragma once

namespace onebit {

class OpRegistry;

void register_all_ops(OpRegistry& r);

// Every op this build implements.
const OpRegistry& default_op_registry();

void register_binary_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);
void register_transpose_op(OpRegistry& r);
void register_slice_op(OpRegistry& r);
void register_expand_tile_ops(OpRegistry& r);
void register_concat_split_ops(OpRegistry& r);
void register_gather_ops(OpRegistry& r);
void register_scatter_ops(OpRegistry& r);
void register_pad_op(OpRegistry& r);
void register_unary_ops(OpRegistry& r);
void register_activation_ops(OpRegistry& r);
void register_variadic_ops(OpRegistry& r);
void register_cast_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_softmax_ops(OpRegistry& r);
void register_layer_norm_ops(OpRegistry& r);
void register_quantize_ops(OpRegistry& r);
void register_misc_ops(OpRegistry& r);
void register_control_flow_ops(OpRegistry& r);
void register_topk_op(OpRegistry& r);
void register_einsum_op(OpRegistry& r);
void register_matmul_ops(OpRegistry& r);
void register_gemm_ops(OpRegistry& r);
void register_matmul_integer_ops(OpRegistry& r);

void register_qdq_matmul_op(OpRegistry& r);
void register_qd8_matmul_op(OpRegistry& r);
void register_gqa_matmul_op(OpRegistry& r);
void register_kv_append_op(OpRegistry& r);
void register_rms_norm_op(OpRegistry& r);
void register_rotary_op(OpRegistry& r);
void register_swiglu_op(OpRegistry& r);
void register_q4_matmul_ops(OpRegistry& r);
void register_matmul_bnb4_op(OpRegistry& r);
// onnxruntime's contrib ops of onnxruntime-genai's builds.
void register_group_query_attention_ops(OpRegistry& r);
void register_simplified_layer_norm_ops(OpRegistry& r);
void register_gather_block_quantized_op(OpRegistry& r);
// ai.onnx 23+: Attention (RMSNormalization and RotaryEmbedding register with their families).
void register_attention_op(OpRegistry& r);
void register_f16w_matmul_op(OpRegistry& r);

}  // namespace onebit
