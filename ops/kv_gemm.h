// Attention's two products over one KV head as the cache stores it: float32,
// float16 (--kv-dtype f16, KernelOptions::kv_dtype), or int8 codes with a
// float32 scale per position (--kv-dtype q8; ops/kv_store.h).
//   scores = Q·Kᵀ   [m×t] from Q [m×d] and the head's t keys
//   mix    = P·V    [m×d] from P [m×t] and the head's t values
// Keys and values are t rows of d elements, contiguous (one head of a
// KvStore, or of a present tensor). Scores run the KV qk kernel at every m;
// mix runs the pv kernel for the few rows of a decode step or a verification
// pass and the float GEMM (ops/sgemm.h, float16 widened first) for a prompt's
// many rows — the same numerics (quant/ukernels/kv_ukernels.h). So a row's
// result never depends on m or the thread count (lookup decoding's batched
// verification stays exact), and float16 and int8 give bit for bit what
// float32 gives on the widened values: they differ only by the rounding of
// what the cache stores. A prompt's mix multiplies each block of rows only
// up to the last nonzero P of its rows (the causal half's exact zeros),
// which changes no bit (ops/kv_gemm.cpp, mix_blocks).
#pragma once

#include <cstddef>

#include "base/dtype.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

class ThreadPool;

// The microkernel families one call uses (tests pick an ISA; kernels the default).
struct KvGemmConfig {
  const SgemmConfig* f32;
  const KvConfig* kv;
};
KvGemmConfig kv_gemm_config();

struct KvRows {
  const void* data;
  DType dtype;                    // F32, F16, or I8
  const float* scales = nullptr;  // I8: one per position
};

// One head of a KV state laid out as ops/kv_store.h lays it: heads
// `head_stride` elements apart from `base`; an int8 head holds capacity =
// head_stride / (d + 4) rows of d codes and then their capacity float32
// scales. Fails unless the head has room for t positions.
KvRows kv_state_head(const void* base, DType dtype, int64_t head_stride, int64_t index, int64_t t, int64_t d);

void kv_scores(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* q, size_t ldq, KvRows k,
               float* scores, size_t ldc, ThreadPool* pool);
void kv_mix(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* p, size_t ldp, KvRows v, float* y,
            size_t ldy, void* workspace, ThreadPool* pool);

// One past the last of rows [floor, t) (of d elements) holding a value that
// is not finite as the kernels read it (float16 and int8 widened), or
// `floor` when none does: how far a P·V that skips a causal block's zero
// tail must still run (0·inf is NaN; ops/kv_gemm.cpp, mix_blocks).
size_t kv_finite_end(KvRows rows, size_t t, size_t d, size_t floor);

// Bytes of 64-byte aligned workspace kv_mix needs for these sizes.
size_t kv_mix_workspace(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, DType kv);

}  // namespace onebit
