// Dynamic int8 (quant/dynamic_int8.h). A scale of 0 (an all-zero column or
// row) is handed to the A8W8 kernel as 1: its quantized values are all 0,
// so the exact accumulator is 0 and the output 0 whatever the scale.
#include "quant/qd8_gemm.h"

#include <cstring>

#include "quant/act_quant.h"
#include "quant/gemm_parallel.h"

namespace onebit {

using namespace qgemm_detail;

namespace {

inline float kernel_scale(float s) { return s > 0 ? s : 1.0f; }

size_t quantized_bytes(size_t m, size_t k) { return round_up(m * k, 64) + round_up(m * sizeof(float), 64); }

}  // namespace

Q8Gemm Qd8Gemm::pack(const Q8GemmConfig& config, size_t k, size_t n, const float* w, size_t ldw,
                                std::vector<float>& scales, ThreadPool* pool) {
  if (ldw == 0) ldw = n;
  std::vector<int8_t> q(k * n);
  std::vector<float> column(k), kernel(n);
  std::vector<int8_t> qcol(k);
  scales.assign(n, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    for (size_t kk = 0; kk < k; ++kk) column[kk] = w[kk * ldw + j];
    scales[j] = quantize_symmetric(column.data(), k, qcol.data());
    for (size_t kk = 0; kk < k; ++kk) q[kk * n + j] = qcol[kk];
    kernel[j] = kernel_scale(scales[j]);
  }
  Q8Weight aw;
  aw.k = k;
  aw.n = n;
  aw.type = Q8Type::kS8;
  aw.data = q.data();
  aw.scale = kernel.data();
  aw.scale_count = n;
  aw.x_type = Q8Type::kS8;
  return Q8Gemm(config, aw, pool);
}

Qd8Gemm::Qd8Gemm(const Q8GemmConfig& config, size_t k, size_t n, const float* w, size_t ldw,
                                 ThreadPool* pool)
    : gemm_(pack(config, k, n, w, ldw, w_scale_, pool)) {}

size_t Qd8Gemm::workspace_bytes(size_t m) const {
  return quantized_bytes(m, k()) + gemm_.workspace_bytes(m);
}

void Qd8Gemm::run(size_t m, const float* x, size_t lda, float* y, size_t ldy, void* workspace,
                          ThreadPool* pool) const {
  if (m == 0) return;
  const size_t k = this->k();
  int8_t* q = static_cast<int8_t*>(workspace);
  float* scale = reinterpret_cast<float*>(static_cast<char*>(workspace) + round_up(m * k, 64));
  split_ranges(pool, m, double(m) * double(k) >= kMinParallelMacs, [&](size_t m0, size_t m1) {
    for (size_t i = m0; i < m1; ++i) scale[i] = kernel_scale(quantize_symmetric(x + i * lda, k, q + i * k));
  });
  Q8Activation a;
  a.scale = scale;
  a.scale_count = m;
  gemm_.run(m, q, k, a, y, ldy, static_cast<char*>(workspace) + quantized_bytes(m, k), pool);
}

}  // namespace onebit
