// Microkernel families (XNNPACK's "gemm config"), picked in
// quant/ukernels/kernel_config.cpp by isa_limit() (base/cpu_features.h).
// The *_for(isa) forms return the family for exactly that level, or null
// when this CPU cannot run it, so tests and benchmarks reach every path.
#pragma once

#include <cstddef>
#include <vector>

#include "base/cpu_features.h"
#include "quant/ukernels/f16w_ukernels.h"
#include "quant/ukernels/f32_ukernels.h"
#include "quant/ukernels/f32_qs8_vquant_ukernels.h"
#include "quant/ukernels/f32_vargmax_ukernels.h"
#include "quant/ukernels/f32_vexp_ukernels.h"
#include "quant/ukernels/kv_ukernels.h"
#include "quant/ukernels/q4_ukernels.h"
#include "quant/ukernels/q8_ukernels.h"

namespace onebit {

// float32 (ops/sgemm.h).
// One microkernel family (XNNPACK's "gemm config"); picked in kernel_config.cpp.
struct SgemmConfig {
  Isa isa;
  size_t mr;  // rows per gemm tile
  size_t nr;  // columns per tile = packed panel width
  size_t kc;  // K block: KC×NR floats of B plus MR×KC of A fit in L1
  F32GemmUkernel gemm;
  F32GemvUkernel gemv;
  F32DotUkernel dot;
  const char* gemm_name;  // "f32_gemm_ukernel_12x32__avx512"
  const char* gemv_name;
  const char* dot_name;
  F32AxpyUkernel axpy;    // decode over a weight read in place (ops/sgemm.h sgemm_weight)
  const char* axpy_name;
};

// The best family this CPU runs (capped by set_isa_limit).
const SgemmConfig& sgemm_config();
// The family for exactly `isa` (Avx512Vnni means Avx512), or null when this
// CPU cannot run it. Tests and benchmarks use it to run every path.
const SgemmConfig* sgemm_config_for(Isa isa);

// int8 x int8 -> int32 (quant/q8_gemm.h). Indexed [x signed].
struct Q8GemmConfig {
  Isa isa;
  size_t mr, nr, kr;   // tile rows, panel width, k per packed group
  size_t gemm_nc;      // columns one gemm call covers (whole panels)
  size_t gemv_nc;      // columns one gemv call covers (whole panels)
  bool int16_acts;     // activations widened to int16 pairs in the workspace
  Q8GemmUkernel gemm[2];
  Q8GemvUkernel gemv[2];
  const char* gemm_name;
  const char* gemv_name;
  Q8PackUkernel pack;  // whole KR-row groups of full panels at load
  const char* pack_name;
  // Decode over `streams` panels read side by side (null: decode on gemv).
  Q8GemvStreamsUkernel gemv_streams[2];
  size_t streams;
  const char* gemv_streams_name;
};

const Q8GemmConfig& q8_gemm_config();
const Q8GemmConfig* q8_gemm_config_for(Isa isa);
// Every config of `isa` this CPU runs, including the other decode prefetch
// (equal results): for tests.
std::vector<const Q8GemmConfig*> q8_gemm_config_variants(Isa isa);

// Q4NX (quant/q4_gemm.h). Indexed [Q4Act][has zero points].
struct Q4GemmConfig {
  Isa isa;
  size_t mr[kQ4ActCount];       // tile rows of gemm
  size_t gemv_nc[kQ4ActCount];  // columns per gemv call (multiple of 16)
  Q4GemmUkernel gemm[kQ4ActCount][2];
  Q4GemmUkernel gemv[kQ4ActCount][2];
  const char* gemm_name[kQ4ActCount];
  const char* gemv_name[kQ4ActCount];
  Q4PackUkernel pack;  // whole groups of the [K,N] layout at load
  const char* pack_name;
  // Decode over `streams` panels read side by side (null: decode on gemv).
  Q4GemvStreamsUkernel gemv_streams[kQ4ActCount];
  size_t streams;
  const char* gemv_streams_name[kQ4ActCount];
  // Every kernel reads float16 scales (Q4Weights::scale_h): a weight whose
  // scales are all exactly float16 keeps them so, 10 % fewer bytes a step.
  bool f16_scales = false;
};

const Q4GemmConfig& q4_gemm_config();
const Q4GemmConfig* q4_gemm_config_for(Isa isa);
// Every config of `isa` this CPU runs, including those another vendor's
// CPU would be given (equal results, other prefetch): for tests.
std::vector<const Q4GemmConfig*> q4_gemm_config_variants(Isa isa);

// float32 activations × float16 weights (ops/f16w_matmul.cpp).
struct F16wGemmConfig {
  Isa isa;
  F32F16wGemmUkernel gemm;  // up to kF16wMR rows (one row: gemv_streams where the family has it)
  const char* gemm_name;
  // The prompt tile, up to wide_mr rows; the same sums as gemm, bit for bit.
  F32F16wGemmUkernel wide;
  size_t wide_mr;
  const char* wide_name;
  // One row against `streams` panels read side by side (null: one row on gemm).
  F32F16wGemvUkernel gemv_streams;
  size_t streams;
  const char* gemv_streams_name;
};

const F16wGemmConfig& f16w_gemm_config();
const F16wGemmConfig* f16w_gemm_config_for(Isa isa);
// Every config of `isa` this CPU runs, including the other decode prefetch
// (equal results): for tests.
std::vector<const F16wGemmConfig*> f16w_gemm_config_variants(Isa isa);

// Attention over a KV cache, float32 or float16 (ops/kv_gemm.cpp).
struct KvConfig {
  Isa isa;
  F16ToF32Ukernel widen;
  F32ToF16Ukernel narrow;
  KvQkUkernel<float> qk_f32;
  KvQkUkernel<uint16_t> qk_f16;
  KvPvUkernel<float> pv_f32;
  KvPvUkernel<uint16_t> pv_f16;
  KvQkQ8Ukernel qk_q8;
  KvPvQ8Ukernel pv_q8;
  const char* qk_name;  // "f32_qk_ukernel_2x4__avx2" (the f16 twin: f32_f16_…)
  const char* pv_name;
};

const KvConfig& kv_config();
const KvConfig* kv_config_for(Isa isa);

// Elementwise float math (the vectorised exp and sigmoid), the float16
// conversions a float16 model's elementwise ops and MatMuls run through
// (bit for bit base/dtype.h's half_to_float / float_to_half), and greedy
// decoding's argmax over a row of logits.
struct VecMathConfig {
  Isa isa;
  F32VUnaryUkernel exp, sigmoid;
  const char* exp_name;
  const char* sigmoid_name;
  F16ToF32Ukernel widen;
  F32ToF16Ukernel narrow;
  F32VArgmaxUkernel argmax;
  const char* argmax_name;
  F32Qs8BlocksUkernel qs8_blocks;  // Q4's int8-block activations
  const char* qs8_blocks_name;
  F16ScaleAddUkernel f16_scale_add;  // a float16 export's scores: ·scale + mask, each rounded to float16
  F32VSoftmaxUkernel softmax;        // one float32 Softmax row (f32_vexp_ukernels.h)
};

const VecMathConfig& vec_math_config();
const VecMathConfig* vec_math_config_for(Isa isa);

}  // namespace onebit
