// Attention's two products over one KV head as the cache stores it: float32,
// or float16 (--kv-dtype f16, KernelOptions::kv_dtype).
//   scores = Q·Kᵀ   [m×t] from Q [m×d] and the head's t keys
//   mix    = P·V    [m×d] from P [m×t] and the head's t values
// Keys and values are t rows of d elements, contiguous (one head of a
// KvStore, or of a present tensor). Scores run the KV qk kernel at every m;
// mix runs the pv kernel for the few rows of a decode step or a verification
// pass and the float GEMM (ops/sgemm.h, float16 widened first) for a prompt's
// many rows — the same numerics (quant/ukernels/kv_ukernels.h). So a row's
// result never depends on m or the thread count (lookup decoding's batched
// verification stays exact), and float16 gives bit for bit what float32
// gives on the widened values: the two differ only by the rounding of what
// the cache stores.
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
  DType dtype;  // F32 or F16
};

void kv_scores(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* q, size_t ldq, KvRows k,
               float* scores, size_t ldc, ThreadPool* pool);
void kv_mix(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* p, size_t ldp, KvRows v, float* y,
            size_t ldy, void* workspace, ThreadPool* pool);

// Bytes of 64-byte aligned workspace kv_mix needs for these sizes.
size_t kv_mix_workspace(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, DType kv);

}  // namespace onebit
