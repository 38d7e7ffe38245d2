// Q4NX: float32 activations × 4-bit weights (DESIGN.md "Q4NX, weight-only
// 4-bit"), Y[M,N] = X[M,K] · dequant(W)[K,N] + bias.
//
// Weights arrive either as the opset-21 graph holds them (int4/uint4 [K,N]
// with a DequantizeLinear's scales along K in blocks, or per output channel)
// or in onnxruntime's com.microsoft::MatMulNBits layout; both are repacked
// once, at construction, into the microkernel layout of quant/q4_ukernels.h
// (64-byte aligned), with K padded to a multiple of 32 by weights that mean
// real zero. Packing from either layout gives identical packed bytes for
// the same weights, hence identical outputs.
//
// Activation precision, chosen at construction and overridable per call:
//   int8-row    QD8: per-row asymmetric int8 (quant/act_quant.h); integer
//               dot products per weight block, one float step per block.
//   int8-block  symmetric int8 with a scale per row and K block (the weight
//               block, or `int8_block` for per-channel weights): finer, for
//               rows with outlier channels.
//   float       weights dequantized in registers and FMA'd with the float
//               activations; no activation quantization.
// The exact operation sequence of each is in quant/q4_ukernels.h.
//
// Lifecycle: construct (validate, pack), workspace_bytes(M, act), run()
// which binds pointers and allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/dtype.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

class ThreadPool;

enum class Q4FloatType : uint8_t { kF32, kF16 };

// Element i of a scale (or float zero-point) array of type t, as float.
inline float load_q4_float(Q4FloatType t, const void* p, size_t i) {
  return t == Q4FloatType::kF32 ? static_cast<const float*>(p)[i] : half_to_float(static_cast<const uint16_t*>(p)[i]);
}

// DequantizeLinear(W, scale, zero_point) → MatMul's B, opset 21.
struct Q4OnnxWeight {
  size_t k = 0, n = 0;
  bool is_signed = true;                  // int4 (−8..7) or uint4 (0..15)
  const uint8_t* data = nullptr;          // ceil(K·N/2) bytes: element i = k·N + n in byte i/2, low nibble first
  size_t block_size = 0;                  // along K (≥ 16, a multiple of 8); 0: per output channel
  Q4FloatType scale_type = Q4FloatType::kF32;
  const void* scales = nullptr;           // [ceil(K/bs)][N] (blocked) or [N] / [1,N] (per channel)
  const uint8_t* zero_points = nullptr;   // shape of scales, 4-bit of W's type packed like W; null: none
  // uint4 without zero points: Q4NX writes 8 explicitly; a caller fusing a
  // DequantizeLinear that has none (ONNX's default is 0) sets 0 here.
  int32_t uint4_zero_point = 8;
};

// com.microsoft::MatMulNBits, bits = 4 (onnxruntime contrib ops):
//   B            uint8 [N][ceil(K/bs)][bs/2]: element k of column n in byte k/2 of its
//                block's blob, low nibble first; codes 0..15
//   scales       [N·ceil(K/bs)] float or float16
//   zero_points  uint8 [N][ceil(ceil(K/bs)/2)] (block b in byte b/2, low nibble first),
//                or float / float16 [N][ceil(K/bs)]; absent: 8
struct Q4MatMulNBitsWeight {
  enum class ZeroPoints : uint8_t { kNone, kPacked, kF32, kF16 };
  size_t k = 0, n = 0, block_size = 0;
  const uint8_t* b = nullptr;
  Q4FloatType scale_type = Q4FloatType::kF32;
  const void* scales = nullptr;
  ZeroPoints zero_point_type = ZeroPoints::kNone;
  const void* zero_points = nullptr;
};

// The weight as DequantizeLinear would make it: [K][N] float32,
// (code − zero point) · scale. For a device that takes int8 weights
// (re-quantized per column from this).
std::vector<float> q4_dequantize(const Q4OnnxWeight& w);
std::vector<float> q4_dequantize(const Q4MatMulNBitsWeight& w);

struct Q4GemmOptions {
  Q4Act act = Q4Act::kInt8Row;  // default precision of run()
  size_t int8_block = 32;       // int8-block activation block for per-channel weights (multiple of 8)
  const float* bias = nullptr;  // [N], copied
};

class Q4Gemm {
 public:
  Q4Gemm(const Q4GemmConfig& config, const Q4OnnxWeight& w, const Q4GemmOptions& options = {},
         ThreadPool* pool = nullptr);
  Q4Gemm(const Q4GemmConfig& config, const Q4MatMulNBitsWeight& w, const Q4GemmOptions& options = {},
         ThreadPool* pool = nullptr);

  size_t k() const { return k_; }
  size_t n() const { return n_; }
  size_t padded_k() const { return kp_; }
  const Q4GemmConfig& config() const { return *config_; }
  Q4Act default_act() const { return act_; }
  // Bytes a decode step streams: codes + scales (+ zero points) as packed.
  size_t weight_bytes() const;
  // What a decode call reads: weight_bytes() and the per-column bias and
  // int8-row correction.
  size_t decode_bytes() const { return weight_bytes() + g_.bytes() + bias_.bytes(); }
  // The packed arrays a call streams (tests compare the two packers with
  // them; benchmarks flush them from the caches for cold runs).
  const AlignedBuffer& packed_codes() const { return codes_; }
  // The scales as kernels read them: float32, or float16 (scales_f16()).
  const AlignedBuffer& packed_scales() const { return scales_f16() ? scales_h_ : scales_; }
  // Whether the scales are kept as float16: the config reads them so and
  // every one is exactly a float16 (then they take half the bytes).
  bool scales_f16() const { return scales_h_.bytes() != 0; }
  const AlignedBuffer& packed_zeros() const { return zeros_; }  // empty unless some z' ≠ 8

  size_t workspace_bytes(size_t m) const { return workspace_bytes(m, act_); }
  size_t workspace_bytes(size_t m, Q4Act act) const;

  void run(size_t m, const float* x, size_t lda, float* y, size_t ldy, void* workspace, ThreadPool* pool) const {
    run(m, act_, x, lda, y, ldy, workspace, pool);
  }
  void run(size_t m, Q4Act act, const float* x, size_t lda, float* y, size_t ldy, void* workspace,
           ThreadPool* pool) const;

  static constexpr size_t kMaxGroup = 8;
  // Siblings on one input (q, k, v; gate, up): gemms[i] writes y[i] (row
  // stride ldy[i]) from the same x. The activations are prepared once and
  // every weight's panels are split over the threads in one call; each
  // output is what gemms[i]->run would write, bit for bit. All must share
  // K, the activation block and the config (group_compatible); at most
  // kMaxGroup.
  static void run_group(const Q4Gemm* const* gemms, size_t count, size_t m, Q4Act act, const float* x, size_t lda,
                        float* const* y, const size_t* ldy, void* workspace, ThreadPool* pool);
  // The workspace run_group needs: the largest of the members'.
  static size_t group_workspace_bytes(const Q4Gemm* const* gemms, size_t count, size_t m, Q4Act act);
  // Whether `a` and `b` may run in one group: same config, K, padded K,
  // weight block and int8-block activation block.
  static bool group_compatible(const Q4Gemm& a, const Q4Gemm& b);

 private:
  template <class Source>
  void pack(const Source& src, ThreadPool* pool);
  void init(size_t k, size_t n, size_t block_size, const Q4GemmOptions& options);
  // After pack: the scales to float16 when the config reads them so and
  // each is exactly a float16 (values unchanged, so results are too).
  void narrow_scales(ThreadPool* pool);
  Q4Weights weights(Q4Act act) const;
  size_t kblock(Q4Act act) const;

  const Q4GemmConfig* config_ = nullptr;
  size_t k_ = 0, n_ = 0, kp_ = 0, bs_ = 0, scale_rows_ = 0, panels_ = 0, int8_block_ = 32;
  Q4Act act_ = Q4Act::kInt8Row;
  bool has_zero_ = false;  // some z' ≠ 8
  AlignedBuffer codes_;    // [panels][Kp/8] Q4Group
  AlignedBuffer scales_;   // [panels][scale_rows][16] float (empty when scales_h_ holds them)
  AlignedBuffer scales_h_; // the same as float16, or empty
  AlignedBuffer zeros_;    // [panels][scale_rows][16] z' (only when has_zero_)
  AlignedBuffer g_;        // [panels·16] float: Σ_b s_b·Σ_k∈b (c − z'_b), blocks of the int8-row kernel
  AlignedBuffer bias_;     // [panels·16] float
};

}  // namespace onebit
