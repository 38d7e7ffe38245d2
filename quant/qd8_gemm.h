// Dynamic int8 for float MatMuls with a constant weight (DESIGN.md "Dynamic
// int8 for float graphs"): W[K,N] is quantized once per column
// (scale = amax/127, symmetric int8, round half to even), each call
// quantizes the activation rows the same way (quant/act_quant.h), and
//   C[m][n] = RN32(acc · a_scale[m] · w_scale[n]),  acc = Σ_k qa·qw (exact)
// through the int8 kernels (quant/q8_gemm.h). A zero column or row has
// scale 0 and produces exact zeros.
#pragma once

#include <cstddef>
#include <vector>

#include "quant/q8_gemm.h"

namespace onebit {

class Qd8Gemm {
 public:
  // w is K×N with row stride ldw (0: N).
  Qd8Gemm(const Q8GemmConfig& config, size_t k, size_t n, const float* w, size_t ldw = 0,
                  ThreadPool* pool = nullptr);
  // From a weight quantize_weight already made ([K][N] int8 and its [N]
  // scales): the host twin of a device path.
  Qd8Gemm(const Q8GemmConfig& config, size_t k, size_t n, const int8_t* q, const std::vector<float>& scales,
          ThreadPool* pool = nullptr);

  // W per column, symmetric int8 (scale = amax/127, 0 for a zero column):
  // [K][N] int8, scales [N]. What the first constructor packs.
  static std::vector<int8_t> quantize_weight(size_t k, size_t n, const float* w, size_t ldw,
                                             std::vector<float>& scales);
  // The scale the kernel multiplies by: 1 for a zero row or column (its
  // codes are all 0, so the output is 0 whatever the scale).
  static float kernel_scale(float s) { return s > 0 ? s : 1.0f; }

  size_t k() const { return gemm_.k(); }
  size_t n() const { return gemm_.n(); }
  const std::vector<float>& weight_scales() const { return w_scale_; }  // [N], 0 for zero columns
  const Q8Gemm& gemm() const { return gemm_; }

  size_t workspace_bytes(size_t m) const { return workspace_bytes_for(gemm_.config(), m, k()); }
  static size_t workspace_bytes_for(const Q8GemmConfig& config, size_t m, size_t k);
  void run(size_t m, const float* x, size_t lda, float* y, size_t ldy, void* workspace, ThreadPool* pool) const;

  // run() in two halves, for a device computing the accumulators:
  // activation rows quantized into the workspace ([m][K] int8 and [m]
  // kernel scales)...
  struct Rows {
    const int8_t* q = nullptr;
    const float* scale = nullptr;
  };
  Rows quantize_rows(size_t m, const float* x, size_t lda, void* workspace, ThreadPool* pool) const {
    return quantize_rows(m, k(), x, lda, workspace, pool);
  }
  static Rows quantize_rows(size_t m, size_t k, const float* x, size_t lda, void* workspace, ThreadPool* pool);
  // ...then the host GEMM on them (the workspace as quantize_rows left it),
  void run_rows(size_t m, const Rows& rows, float* y, size_t ldy, void* workspace, ThreadPool* pool) const;
  // or the epilogue on exact accumulators acc[m][N] (= Σ q·w) made elsewhere.
  void epilogue(size_t m, const Rows& rows, const int32_t* acc, size_t ldacc, float* y, size_t ldy) const;

 private:
  static Q8Gemm pack(const Q8GemmConfig& config, size_t k, size_t n, const int8_t* q,
                     const std::vector<float>& scales, ThreadPool* pool);

  std::vector<float> w_scale_;
  Q8Gemm gemm_;
};

}  // namespace onebit
