// A8W8 exact integer GEMM: the fused DequantizeLinear → MatMul
// [→ QuantizeLinear] group of DESIGN.md ("Fused A8W8 group").
//
//   x[M,K]  int8/uint8, row stride lda; s_x, zx per tensor or per row m
//   W[K,N]  int8/uint8 (an ONNX MatMul's B); s_w, zw per tensor or per column n
//   acc[m][n] = Σ_k (x − zx[m])·(w − zw[n])                      exact int32
//   y[m][n]   = RN32(acc · s_x[m]·s_w[n])                         float output
//   y_q[m][n] = saturate(RNE(acc · s_x[m]·s_w[n] / s_y) + zp_y)   int8/uint8 output
//
// acc is exact for K ≤ kQ8MaxK (33025: K·255·255 < 2³¹); larger K is refused
// at create. The rounding is that of the real number, ties to even; why, and
// how it relates to ONNX Runtime's float32 path, is in quant/requantize.h.
//
// Lifecycle (XNNPACK's create / reshape / run): the constructor validates
// and packs W once into the chosen kernel family's layout (64-byte aligned);
// workspace_bytes(M) sizes the per-call scratch; run() binds pointers and
// computes, allocating nothing. The weight column sums Σ_k (w − zw) are only
// needed when some activation zero point is non-zero: they are computed
// from the packed weight the first time such a call arrives, once
// (colsum_computations() counts it, so a test can assert that a symmetric
// graph never paid for them).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/aligned_buffer.h"
#include "quant/requantize.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

class ThreadPool;

enum class Q8Type : uint8_t { kS8, kU8 };

// The constant operand, as the graph holds it.
struct Q8Weight {
  size_t k = 0, n = 0;
  Q8Type type = Q8Type::kS8;
  const void* data = nullptr;          // [K][ldw] bytes
  size_t ldw = 0;                      // 0: N
  const float* scale = nullptr;        // [scale_count], 1 or N
  size_t scale_count = 1;
  const int32_t* zero_point = nullptr; // [zero_point_count], 1 or N; null: 0
  size_t zero_point_count = 1;
  Q8Type x_type = Q8Type::kS8;         // the activation dtype this packing is for
};

// Per-call activation parameters: per tensor (count 1) or per row (count M).
struct Q8Activation {
  const float* scale = nullptr;
  size_t scale_count = 1;
  const int32_t* zero_point = nullptr;  // null: 0
  size_t zero_point_count = 1;
};

// QuantizeLinear after the MatMul, per tensor.
struct Q8OutputQuant {
  float scale = 1.0f;
  int32_t zero_point = 0;
  Q8Type type = Q8Type::kS8;
};

// The kernels' epilogue (q8_store_scalar) on accumulators that are already
// exact: y[i][j] = RN32(acc·S) or saturate(RNE(acc·S/s_y) + zp_y) with
// S = sx[i·sx_step]·sw[j] in double, as the kernels compute it.
void q8_epilogue(size_t m, size_t n, const int32_t* acc, size_t ldacc, const float* sx, size_t sx_step,
                 const double* sw, Q8Out out, const Q8Requant& rq, void* y, size_t ldy);

class Q8Gemm {
 public:
  Q8Gemm(const Q8GemmConfig& config, const Q8Weight& w, ThreadPool* pool = nullptr);
  explicit Q8Gemm(const Q8Weight& w, ThreadPool* pool = nullptr) : Q8Gemm(q8_gemm_config(), w, pool) {}

  size_t k() const { return k_; }
  size_t n() const { return n_; }
  Q8Type x_type() const { return x_type_; }
  const Q8GemmConfig& config() const { return *config_; }
  // Bytes of packed weight a call reads once per row block (decode: per call).
  size_t packed_bytes() const { return packed_bytes_; }
  // What a decode call reads: the panels and the per-column constants of the epilogue.
  size_t decode_bytes() const { return packed_bytes_ + c1_.bytes() + sw_.bytes(); }
  const AlignedBuffer& packed() const { return packed_; }

  size_t workspace_bytes(size_t m) const { return workspace_bytes_for(*config_, m, k_); }
  static size_t workspace_bytes_for(const Q8GemmConfig& config, size_t m, size_t k);

  // y = acc · s_x · s_w as float32, row stride ldy.
  void run(size_t m, const void* x, size_t lda, const Q8Activation& xp, float* y, size_t ldy, void* workspace,
           ThreadPool* pool) const;
  // y_q = saturate(RNE(acc · s_x · s_w / s_y) + zp_y), int8 or uint8 per rq.type.
  void run(size_t m, const void* x, size_t lda, const Q8Activation& xp, const Q8OutputQuant& rq, void* y,
           size_t ldy, void* workspace, ThreadPool* pool) const;

  // The outputs of run() from exact accumulators computed elsewhere (a
  // device: quant/q8_device.h): acc[m×N] with row stride ldacc, through the
  // same epilogue arithmetic as the kernels, so the outputs are
  // bit-identical to run()'s for the same accumulators.
  void epilogue(size_t m, const int32_t* acc, size_t ldacc, const Q8Activation& xp, float* y, size_t ldy) const;
  void epilogue(size_t m, const int32_t* acc, size_t ldacc, const Q8Activation& xp, const Q8OutputQuant& rq,
                void* y, size_t ldy) const;

  // How many times the weight column sums were computed (0 or 1).
  int colsum_computations() const { return lazy_->computed.load() ? 1 : 0; }

 private:
  struct Lazy {
    std::once_flag once;
    std::atomic<bool> computed{false};
  };

  void run_impl(size_t m, const void* x, size_t lda, const Q8Activation& xp, Q8Out out, const Q8Requant& rq,
                void* y, size_t ldy, void* workspace, ThreadPool* pool) const;
  const int32_t* colsums() const;
  void epilogue_impl(size_t m, const int32_t* acc, size_t ldacc, const Q8Activation& xp, Q8Out out,
                     const Q8Requant& rq, void* y, size_t ldy) const;

  const Q8GemmConfig* config_ = nullptr;
  size_t k_ = 0, n_ = 0, kr_ = 0, panels_ = 0, packed_bytes_ = 0;
  Q8Type x_type_ = Q8Type::kS8;
  int32_t delta_ = 0;    // p = w + delta (operand domain, quant/q8_ukernels.h)
  AlignedBuffer packed_;  // [panels][Kr/KR][NR][KR] bytes
  AlignedBuffer c1_;      // [panels·NR] int32: delta + zw[n]
  AlignedBuffer cz_;      // [panels·NR] int32: Σ_k (w − zw[n]), filled lazily
  AlignedBuffer sw_;      // [panels·NR] double: s_w[n]
  std::unique_ptr<Lazy> lazy_;
};

}  // namespace onebit
