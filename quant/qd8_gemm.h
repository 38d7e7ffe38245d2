// Dynamic int8 for float MatMuls with a constant weight (DESIGN.md "Dynamic
// int8 for float graphs"): W[K,N] is quantized once per column
// (scale = amax/127, symmetric int8, round half to even), each call
// quantizes the activation rows the same way (quant/act_quant.h), and
//   C[m][n] = RN32(acc · a_scale[m] · w_scale[n]),  acc = Σ_k qa·qw (exact)
// through the A8W8 kernels (quant/qgemm_a8w8.h). A zero column or row has
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

  size_t k() const { return gemm_.k(); }
  size_t n() const { return gemm_.n(); }
  const std::vector<float>& weight_scales() const { return w_scale_; }  // [N], 0 for zero columns
  const Q8Gemm& gemm() const { return gemm_; }

  size_t workspace_bytes(size_t m) const;
  void run(size_t m, const float* x, size_t lda, float* y, size_t ldy, void* workspace, ThreadPool* pool) const;

 private:
  static Q8Gemm pack(const Q8GemmConfig& config, size_t k, size_t n, const float* w, size_t ldw,
                        std::vector<float>& scales, ThreadPool* pool);

  std::vector<float> w_scale_;
  Q8Gemm gemm_;
};

}  // namespace onebit
