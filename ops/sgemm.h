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

#include "quant/ukernels/kernel_config.h"

namespace onebit {

class ThreadPool;

// B[K,N] packed once into the panel layout of one config:
//   data: [ceil(N/NR)][K][NR] floats, columns past N zero; 64-byte aligned.
class PackedB {
 public:
  PackedB() = default;
  // b is K×N with row stride ldb, or, when trans_b, N×K with row stride ldb.
  // huge_pages: fault the copy in on huge pages (KernelOptions::huge_pages).
  PackedB(const SgemmConfig& config, size_t k, size_t n, const float* b, size_t ldb, bool trans_b,
          ThreadPool* pool = nullptr, bool huge_pages = false);

  const SgemmConfig& config() const { return *config_; }
  size_t k() const { return k_; }
  size_t n() const { return n_; }
  size_t panels() const { return panels_; }
  const float* data() const { return data_.get(); }
  size_t bytes() const { return panels_ * k_ * (config_ ? config_->nr : 0) * sizeof(float); }

 private:
  struct Free {
    Free() noexcept {}
    Free(size_t b, size_t a, bool p) noexcept : bytes(b), align(a), pages(p) {}
    size_t bytes = 0, align = 0;
    bool pages = false;  // budgeted_pages, else budgeted_alloc
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

// C = A·B + bias with B a constant [K,N] read where it lies, row stride ldb
// (a weight in the model file's mapping: never copied, nothing to load):
//   M = 1: B's rows in order through the config's axpy kernel, each column
//     chunk of C starting at the bias: one pass through B, a linear stream
//     when a chunk spans the row;
//   M > 1: the GEMM of sgemm_packed on B as it lies (a few dozen rows), or
//     with each KC×NC block of B packed as a task needs it into one of the
//     workspace's per-thread block buffers (ops/sgemm.cpp has the blocking).
// Every output is the FMA chain sgemm_packed computes, k in order from the
// bias, so the two agree bit for bit. `workspace` holds
// sgemm_weight_workspace(…, threads) bytes; up to `threads` tasks run at
// once (more wait for a buffer).
void sgemm_weight(const SgemmConfig& config, size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                  size_t ldb, const float* bias, float* c, size_t ldc, void* workspace, size_t threads,
                  ThreadPool* pool);
size_t sgemm_weight_workspace(const SgemmConfig& config, size_t m, size_t n, size_t k, size_t threads);

// C = op(A)·op(B) + bias with B an activation (packed per call when rows of
// A reuse it, else read in place).
void sgemm(const SgemmConfig& config, size_t m, size_t n, size_t k, const float* a, size_t lda, bool trans_a,
           const float* b, size_t ldb, bool trans_b, const float* bias, float* c, size_t ldc, void* workspace,
           ThreadPool* pool);
size_t sgemm_workspace(const SgemmConfig& config, size_t m, size_t n, size_t k, bool trans_a, bool trans_b);

// The same as sgemm (no transposes, no bias) in blocks of rows, each over a
// prefix of the k rows of B: rows [starts[i], starts[i + 1]) (the last to m)
// are C = A[:, :ks[i]]·B[:ks[i], :]. B is packed once for all of them. Each
// output is the FMA chain sgemm computes, cut after ks[i] terms.
// Workspace: sgemm_workspace(config, m, n, k, false, false).
void sgemm_row_blocks(const SgemmConfig& config, size_t m, size_t n, size_t k, const float* a, size_t lda,
                      const float* b, size_t ldb, const size_t* starts, const size_t* ks, size_t blocks, float* c,
                      size_t ldc, void* workspace, ThreadPool* pool);

}  // namespace onebit
