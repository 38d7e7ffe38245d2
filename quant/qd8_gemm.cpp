// Dynamic int8 (quant/dynamic_int8.h). A scale of 0 (an all-zero column or
// row) is handed to the A8W8 kernel as 1: its quantized values are all 0,
// so the exact accumulator is 0 and the output 0 whatever the scale.
#include "quant/qd8_gemm.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/act_quant.h"
#include "quant/gemm_parallel.h"

namespace onebit {

using namespace qgemm_detail;

namespace {

size_t quantized_bytes(size_t m, size_t k) { return round_up(m * k, 64) + round_up(m * sizeof(float), 64); }

}  // namespace

std::vector<int8_t> Qd8Gemm::quantize_weight(size_t k, size_t n, const float* w, size_t ldw,
                                             std::vector<float>& scales) {
  // Each column as quantize_symmetric quantizes it, read a row at a time:
  // gathering a column reads a cache line per element (a float32 0.6B
  // model took seconds to load under --int8). The max ignores NaN as
  // quantize_symmetric's does; the codes are its codes.
  if (ldw == 0) ldw = n;
  std::vector<int8_t> q(k * n);
  std::vector<float> amax(n, 0.0f);
  scales.assign(n, 0.0f);
  for (size_t kk = 0; kk < k; ++kk) {
    const float* row = w + kk * ldw;
    for (size_t j = 0; j < n; ++j) amax[j] = std::fabs(row[j]) > amax[j] ? std::fabs(row[j]) : amax[j];
  }
  for (size_t j = 0; j < n; ++j) {
    const float scale = amax[j] / 127.0f;
    scales[j] = scale >= FLT_MIN ? scale : 0.0f;
  }
  for (size_t kk = 0; kk < k; ++kk) {
    const float* row = w + kk * ldw;
    int8_t* out = q.data() + kk * n;
    for (size_t j = 0; j < n; ++j) {
      if (scales[j] == 0.0f) continue;  // q is zeroed
      const float v = std::nearbyint(row[j] / scales[j]);
      out[j] = static_cast<int8_t>(v >= -127.0f ? (v > 127.0f ? 127.0f : v) : -127.0f);
    }
  }
  return q;
}

Q8Gemm Qd8Gemm::pack(const Q8GemmConfig& config, size_t k, size_t n, const int8_t* q,
                     const std::vector<float>& scales, ThreadPool* pool) {
  std::vector<float> kernel(n);
  for (size_t j = 0; j < n; ++j) kernel[j] = kernel_scale(scales[j]);
  Q8Weight aw;
  aw.k = k;
  aw.n = n;
  aw.type = Q8Type::kS8;
  aw.data = q;
  aw.scale = kernel.data();
  aw.scale_count = n;
  aw.x_type = Q8Type::kS8;
  return Q8Gemm(config, aw, pool);
}

Qd8Gemm::Qd8Gemm(const Q8GemmConfig& config, size_t k, size_t n, const float* w, size_t ldw, ThreadPool* pool)
    : gemm_(pack(config, k, n, quantize_weight(k, n, w, ldw, w_scale_).data(), w_scale_, pool)) {}

Qd8Gemm::Qd8Gemm(const Q8GemmConfig& config, size_t k, size_t n, const int8_t* q, const std::vector<float>& scales,
                 ThreadPool* pool)
    : w_scale_(scales), gemm_(pack(config, k, n, q, scales, pool)) {}

size_t Qd8Gemm::workspace_bytes_for(const Q8GemmConfig& config, size_t m, size_t k) {
  return quantized_bytes(m, k) + Q8Gemm::workspace_bytes_for(config, m, k);
}

Qd8Gemm::Rows Qd8Gemm::quantize_rows(size_t m, size_t k, const float* x, size_t lda, void* workspace,
                                     ThreadPool* pool) {
  int8_t* q = static_cast<int8_t*>(workspace);
  float* scale = reinterpret_cast<float*>(static_cast<char*>(workspace) + round_up(m * k, 64));
  split_ranges(pool, m, double(m) * double(k) >= kMinParallelMacs, [&](size_t m0, size_t m1) {
    for (size_t i = m0; i < m1; ++i) scale[i] = kernel_scale(quantize_symmetric(x + i * lda, k, q + i * k));
  });
  return Rows{q, scale};
}

void Qd8Gemm::run(size_t m, const float* x, size_t lda, float* y, size_t ldy, void* workspace,
                  ThreadPool* pool) const {
  if (m == 0) return;
  run_rows(m, quantize_rows(m, x, lda, workspace, pool), y, ldy, workspace, pool);
}

void Qd8Gemm::run_rows(size_t m, const Rows& rows, float* y, size_t ldy, void* workspace, ThreadPool* pool) const {
  Q8Activation a;
  a.scale = rows.scale;
  a.scale_count = m;
  gemm_.run(m, rows.q, k(), a, y, ldy, static_cast<char*>(workspace) + quantized_bytes(m, k()), pool);
}

void Qd8Gemm::epilogue(size_t m, const Rows& rows, const int32_t* acc, size_t ldacc, float* y, size_t ldy) const {
  Q8Activation a;
  a.scale = rows.scale;
  a.scale_count = m;
  gemm_.epilogue(m, acc, ldacc, a, y, ldy);
}

}  // namespace onebit
