// com.onebit::F16wMatMul(x float [..., K], W constant float16 [K, N]) —
// written by graph/passes/f16_weight_matmul.cpp for MatMul(x, Cast(W, to
// float)): the "float16 weights, float32 compute" graphs; and for a float16
// model's MatMul(x float16, W float16), where x is widened to float32, the
// product computed as for float32 x, and each output rounded once to
// float16 (what onnxruntime's CPU provider computes, through the Casts it
// puts around a float16 MatMul it has no kernel for). transB = 1: W is
// stored [N, K] (a tied LM head's table) and packed from there. The weight stays
// float16, packed once at create into 16-column panels ([N/16][K][16]
// halves, columns past N zero), and each product widens it in registers
// (quant/ukernels/f16w_ukernels.h): a decode step reads 2 bytes a weight
// instead of the 4 a folded float32 copy would. The result is the float
// product of the float16 values, as the unfused Cast → MatMul computes it
// (up to the order of the sums).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "graph/op_registry.h"
#include "ops/op_util.h"
#include "quant/gemm_parallel.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

class F16wMatMulKernel : public Kernel {
 public:
  explicit F16wMatMulKernel(const KernelInfo& info) : config_(&f16w_gemm_config()) {
    const Tensor* w = info.constant(1);
    if (!w || w->rank() != 2 || w->dtype() != DType::F16)
      fail("the weight ('{}') must be a constant float16 [K, N] tensor", info.input_name(1));
    const bool trans_b = info.attrs().get_int("transB", 0) != 0;
    k_ = w->dim(trans_b ? 1 : 0);
    n_ = w->dim(trans_b ? 0 : 1);
    panels_ = (n_ + static_cast<int64_t>(kF16wNR) - 1) / static_cast<int64_t>(kF16wNR);
    const size_t count = static_cast<size_t>(panels_ * k_) * kF16wNR;
    bytes_ = (count * sizeof(uint16_t) + 63) / 64 * 64;
    // Zeroed (the columns past N stay 0); a large one on populated pages of
    // its own (base/aligned_buffer.h).
    const std::string what = fmt::format("packing float16 weight [{}, {}]", k_, n_);
    packed_ = std::make_shared<AlignedBuffer>(bytes_, what.c_str());
    uint16_t* p = packed_->as<uint16_t>();
    const uint16_t* src = w->data<uint16_t>();
    const size_t k = static_cast<size_t>(k_), n = static_cast<size_t>(n_);
    if (trans_b) {
      // A source row (one output column's K weights, contiguous) to its panel lane.
      for (size_t j = 0; j < n; ++j) {
        uint16_t* lane = p + (j / kF16wNR) * k * kF16wNR + j % kF16wNR;
        const uint16_t* row = src + j * k;
        for (size_t i = 0; i < k; ++i) lane[i * kF16wNR] = row[i];
      }
    } else {
      // A source row at a time (contiguous), its 16-column runs to the panels.
      for (size_t i = 0; i < k; ++i)
        for (size_t pn = 0; pn < static_cast<size_t>(panels_); ++pn) {
          const size_t col = pn * kF16wNR;
          std::memcpy(p + (pn * k + i) * kF16wNR, src + i * n + col, std::min(kF16wNR, n - col) * sizeof(uint16_t));
        }
    }
  }
  bool packs_constant(int input) const override { return input == 1; }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16) fail("input A is {}, expected float32 or float16", dtype_name(t));
    const Shape& x = ctx.shape(0);
    if (x.empty() || x.back() != k_) fail("input A has shape {}, expected [..., K={}]", shape_str(x), k_);
    Shape y = x;
    y.back() = n_;
    ctx.set_output(0, t, y);
    // float16 A: A and the product as float32.
    if (t == DType::F16) {
      const size_t m = static_cast<size_t>(numel(x) / std::max<int64_t>(k_, 1));
      ctx.set_workspace(align64(m * static_cast<size_t>(k_) * sizeof(float)) +
                        align64(m * static_cast<size_t>(n_) * sizeof(float)));
    }
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int64_t m = k_ ? X.size() / k_ : 0;
    if (m == 0) return;
    const bool half = X.dtype() == DType::F16;
    const size_t mk = static_cast<size_t>(m * k_), mn = static_cast<size_t>(m * n_);
    auto* ws = static_cast<unsigned char*>(half ? ctx.workspace() : nullptr);
    float* x_wide = half ? reinterpret_cast<float*>(ws) : nullptr;
    float* y_wide = half ? reinterpret_cast<float*>(ws + align64(mk * sizeof(float))) : nullptr;
    if (half) vec_math_config().widen(mk, X.data<uint16_t>(), x_wide);
    const float* x = half ? x_wide : X.data<float>();
    float* y = half ? y_wide : ctx.output(0).data<float>();
    const uint16_t* w = packed_->as<uint16_t>();
    const size_t rows = static_cast<size_t>(m), k = static_cast<size_t>(k_), n = static_cast<size_t>(n_);
    // Decode (a few rows) on the decode tile; a prompt on the wide tile,
    // which sums every output the same way (bit for bit), so how the rows
    // and panels are split over the threads never changes a result.
    using namespace qgemm_detail;
    const bool wide = rows > kF16wMR;
    const F32F16wGemmUkernel gemm = wide ? config_->wide : config_->gemm;
    const size_t mr = wide ? config_->wide_mr : kF16wMR;
    const size_t panel_bytes = k * kF16wNR * sizeof(uint16_t);
    const bool worth = double(rows) * double(k) * double(n) >= kMinParallelMacs;
    auto tiles = [&](size_t r0, size_t r1, size_t p0, size_t p1) {
      for (size_t pn = p0; pn < p1; ++pn) {
        const size_t col = pn * kF16wNR, nc = std::min(kF16wNR, n - col);
        for (size_t r = r0; r < r1; r += mr)
          gemm(std::min(mr, r1 - r), k, x + r * k, k, w + pn * k * kF16wNR, y + r * n + col, n, nc);
      }
    };
    ThreadPool* pool = &ctx.pool();
    const size_t panels = static_cast<size_t>(panels_);
    if (!wide) {
      // Decode: runs of consecutive panels (one stream each) taken
      // dynamically, so a small projection splits over the threads too.
      split_runs(pool, panels, div_up(kDecodeRunBytes, panel_bytes), worth, [&](size_t p0, size_t p1) {
        // The kernel prefetches 8 KiB ahead of its loads: ask for the run's
        // first 8 KiB now, or a short run starts on demand misses.
        const char* head = reinterpret_cast<const char*>(w + p0 * k * kF16wNR);
        const size_t head_bytes = std::min<size_t>(8192, (p1 - p0) * panel_bytes);
        for (size_t off = 0; off < head_bytes; off += 64) _mm_prefetch(head + off, _MM_HINT_T1);
        tiles(0, rows, p0, p1);
      });
    } else {
      // A prompt: row blocks × runs of panels, several tasks per thread.
      run_tiles(pool, rows, panels, mr, worth, tiles);
    }
    if (half) vec_math_config().narrow(mn, y_wide, ctx.output(0).data<uint16_t>());
  }

  std::string describe() const override {
    return fmt::format("float16 weight {}x{} ({} MB packed), {} / {}", k_, n_, bytes_ >> 20, config_->gemm_name,
                       config_->wide_name);
  }

 private:
  const F16wGemmConfig* config_;
  int64_t k_ = 0, n_ = 0, panels_ = 0;
  size_t bytes_ = 0;
  std::shared_ptr<AlignedBuffer> packed_;  // [panels][K][16] float16 bits
};

}  // namespace

void register_f16w_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "F16wMatMul", 1, 1, make_factory<F16wMatMulKernel>());
}

}  // namespace onebit
