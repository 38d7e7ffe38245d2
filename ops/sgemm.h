// SGEMM: C[M,N] = op(A)[M,K] · op(B)[K,N] (+ bias[N]), float32, row-major with
// leading dimensions; op(X) is X or Xᵀ.
//
// Goto/BLIS blocking around XNNPACK-style microkernels:
//   B is cut into NR-wide column panels stored K-major ([N/NR][K][NR]), so one
//     1×NR strip of outputs reads contiguous memory. Constant weights are
//     packed once (PackedB); an activation B (attention's QKᵀ, AV) is packed
//     per call into the workspace, or read in place when there is no reuse.
//   A is packed into MR-row micro-panels ([M/MR][K][MR]) once per call.
//   K is blocked by KC and N by NC panels: an MR×KC micro-panel of A stays
//     in L1 while the KC×NC block of B streams past it from L2 (prefetched
//     by the kernel), and the M block's packed A stays in L2 across NC
//     blocks — the loop order MLAS uses; measured ~10 % faster here than
//     keeping the B block in L1 and streaming A.
//   M = 1 (decode) skips all that: one pass over the panels with a one-row
//     kernel, which is a single linear stream through the packed weights.
// Threading splits N panels (and M blocks for tall A) over the session pool;
// problems too small to pay for a wake-up run on the calling thread.
#pragma once

#include <cstddef>
#include <memory>

#include "ops/cpu_features.h"

namespace onebit {

class ThreadPool;

// C[mr×nc] = A·B + bias, or C += A·B when `accumulate` (K blocks after the first).
//   a:    packed micro-panel: kc steps of MR floats (rows mr..MR-1 are padding)
//   b:    kc rows of at least nc readable floats, row stride ldb (packed panels: ldb = NR)
//   c:    mr rows of nc floats, row stride ldc
//   bias: nc floats or null (ignored when accumulating)
using F32GemmUkernel = void (*)(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb, float* c,
                                size_t ldc, const float* bias, bool accumulate);
// c[nc] = a[k] · B[k×nc] + bias: one output row over one panel (nc <= NR).
using F32GemvUkernel = void (*)(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                const float* bias);

// C[m×n] = A·Bᵀ + bias for m <= kF32DotMaxRows: A is m×k (row stride lda), B
// n×k (row stride ldb), both read in place.
using F32DotUkernel = void (*)(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
                               float* c, size_t ldc, const float* bias);

// One microkernel family (XNNPACK's "gemm config"); picked in sgemm_config.cpp.
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
};

// The best family this CPU runs, capped by ONEBIT_ISA.
const SgemmConfig& sgemm_config();
// The family for exactly `isa` (Avx512Vnni means Avx512), or null when this
// CPU cannot run it. Tests and benchmarks use it to run every path.
const SgemmConfig* sgemm_config_for(Isa isa);

// B[K,N] packed once into the panel layout of one config:
//   data: [ceil(N/NR)][K][NR] floats, columns past N zero; 64-byte aligned.
class PackedB {
 public:
  PackedB() = default;
  // b is K×N with row stride ldb, or, when trans_b, N×K with row stride ldb.
  PackedB(const SgemmConfig& config, size_t k, size_t n, const float* b, size_t ldb, bool trans_b,
          ThreadPool* pool = nullptr);

  const SgemmConfig& config() const { return *config_; }
  size_t k() const { return k_; }
  size_t n() const { return n_; }
  size_t panels() const { return panels_; }
  const float* data() const { return data_.get(); }
  size_t bytes() const { return panels_ * k_ * (config_ ? config_->nr : 0) * sizeof(float); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  const SgemmConfig* config_ = nullptr;
  size_t k_ = 0, n_ = 0, panels_ = 0;
  std::unique_ptr<float[], Free> data_;
};

// C = op(A)·B + bias with B packed. A is M×K (row stride lda), or K×M when
// trans_a. `workspace` holds sgemm_packed_workspace() bytes, 64-byte aligned;
// `pool` may be null (one thread).
void sgemm_packed(size_t m, const float* a, size_t lda, bool trans_a, const PackedB& b, const float* bias, float* c,
                  size_t ldc, void* workspace, ThreadPool* pool);
size_t sgemm_packed_workspace(const PackedB& b, size_t m, bool trans_a);

// C = op(A)·op(B) + bias with B an activation (packed per call when rows of
// A reuse it, else read in place).
void sgemm(const SgemmConfig& config, size_t m, size_t n, size_t k, const float* a, size_t lda, bool trans_a,
           const float* b, size_t ldb, bool trans_b, const float* bias, float* c, size_t ldc, void* workspace,
           ThreadPool* pool);
size_t sgemm_workspace(const SgemmConfig& config, size_t m, size_t n, size_t k, bool trans_a, bool trans_b);

}  // namespace onebit
