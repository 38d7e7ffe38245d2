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
// instead of the 4 a folded float32 copy would. A one-row product (a decode
// step) splits the panels into a few contiguous shares a thread and reads
// each share as sub-ranges side by side (the gemv_streams kernel: four on
// AVX-512, two on AVX2), so each thread keeps several long streams in
// flight. The result is the float product of the float16 values, as the
// unfused Cast → MatMul computes it (up to the order of the sums).
//
// Siblings: F16wMatMul(x, W1, ..., Wg) -> (y1, ..., yg), written by
// graph/passes/sibling_matmul.cpp for MatMuls reading the same x (q, k and v;
// gate and up). The weights' panels are packed end to end and a call splits
// them all over the threads at once: one parallel call instead of g, each
// output summed exactly as its own F16wMatMul sums it.
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
    const int weights = info.num_inputs() - 1;
    if (weights < 1 || info.num_outputs() != weights)
      fail("expected x, then one or more weights and one output per weight; got {} inputs and {} outputs",
           info.num_inputs(), info.num_outputs());
    const bool trans_b = info.attrs().get_int("transB", 0) != 0;
    if (trans_b && weights > 1) fail("transB = 1 takes one weight, got {}", weights);
    if (static_cast<size_t>(weights) > kMaxOutputs) fail("{} weights, at most {} in one group", weights, kMaxOutputs);
    size_t panels = 0;
    for (int i = 1; i <= weights; ++i) {
      const Tensor* w = info.constant(i);
      if (!w || w->rank() != 2 || w->dtype() != DType::F16)
        fail("the weight ('{}') must be a constant float16 [K, N] tensor", info.input_name(i));
      const int64_t k = w->dim(trans_b ? 1 : 0), n = w->dim(trans_b ? 0 : 1);
      if (i > 1 && k != k_)
        fail("the weight ('{}') has K = {}, expected {} as the first weight's", info.input_name(i), k, k_);
      k_ = k;
      segments_.push_back({n, panels});
      panels += qgemm_detail::div_up(static_cast<size_t>(n), kF16wNR);
    }
    panels_ = panels;
    const size_t k = static_cast<size_t>(k_);
    bytes_ = align64(panels_ * k * kF16wNR * sizeof(uint16_t));
    // Zeroed (the columns past each N stay 0); a large one on populated
    // pages of its own (base/aligned_buffer.h). The weights' panels follow
    // one another, one stream for a decode step to read.
    const std::string what = fmt::format("packing float16 weight{} [{}, {}]", weights > 1 ? "s" : "", k_, n_total());
    packed_ = std::make_shared<AlignedBuffer>(bytes_, what.c_str());
    for (int i = 1; i <= weights; ++i) {
      const Segment& seg = segments_[static_cast<size_t>(i - 1)];
      pack(info.constant(i)->data<uint16_t>(), static_cast<size_t>(seg.n), trans_b,
           packed_->as<uint16_t>() + seg.panel0 * k * kF16wNR);
    }
  }
  bool packs_constant(int input) const override { return input >= 1; }
  uint64_t packed_bytes() const override { return bytes_; }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16) fail("input A is {}, expected float32 or float16", dtype_name(t));
    const Shape& x = ctx.shape(0);
    if (x.empty() || x.back() != k_) fail("input A has shape {}, expected [..., K={}]", shape_str(x), k_);
    for (size_t i = 0; i < segments_.size(); ++i) {
      Shape y = x;
      y.back() = segments_[i].n;
      ctx.set_output(static_cast<int>(i), t, y);
    }
    // float16 A: A and the products as float32.
    if (t == DType::F16) {
      const size_t m = static_cast<size_t>(numel(x) / std::max<int64_t>(k_, 1));
      size_t bytes = align64(m * static_cast<size_t>(k_) * sizeof(float));
      for (const Segment& seg : segments_) bytes += align64(m * static_cast<size_t>(seg.n) * sizeof(float));
      ctx.set_workspace(bytes);
    }
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int64_t m = k_ ? X.size() / k_ : 0;
    if (m == 0) return;
    const bool half = X.dtype() == DType::F16;
    const size_t rows = static_cast<size_t>(m), k = static_cast<size_t>(k_);
    auto* ws = static_cast<unsigned char*>(half ? ctx.workspace() : nullptr);
    const float* x = X.data<float>();
    if (half) {
      float* x_wide = reinterpret_cast<float*>(ws);
      vec_math_config().widen(rows * k, X.data<uint16_t>(), x_wide);
      x = x_wide;
      ws += align64(rows * k * sizeof(float));
    }
    // Each weight's product: its output, or (float16 A) its float32 rows in the workspace.
    float* y[kMaxOutputs];
    const size_t outputs = segments_.size();
    for (size_t i = 0; i < outputs; ++i) {
      if (half) {
        y[i] = reinterpret_cast<float*>(ws);
        ws += align64(rows * static_cast<size_t>(segments_[i].n) * sizeof(float));
      } else {
        y[i] = ctx.output(static_cast<int>(i)).data<float>();
      }
    }
    const uint16_t* w = packed_->as<uint16_t>();
    // One row on the streams kernel, a few rows on the decode tile, a
    // prompt on the wide tile: all three sum every output the same way (bit
    // for bit), so how the rows and panels are split over the threads never
    // changes a result.
    using namespace qgemm_detail;
    const bool wide = rows > kF16wMR;
    const F32F16wGemmUkernel gemm = wide ? config_->wide : config_->gemm;
    const size_t mr = wide ? config_->wide_mr : kF16wMR;
    const size_t panel_bytes = k * kF16wNR * sizeof(uint16_t);
    const bool worth = double(rows) * double(k) * double(n_total()) >= kMinParallelMacs;
    // Panels [p0, p1) of the weights laid end to end, each into its own output.
    auto tiles = [&](size_t r0, size_t r1, size_t p0, size_t p1) {
      size_t s = 0;
      while (s + 1 < outputs && segments_[s + 1].panel0 <= p0) ++s;
      for (size_t pn = p0; pn < p1; ++pn) {
        if (s + 1 < outputs && segments_[s + 1].panel0 == pn) ++s;
        const size_t n = static_cast<size_t>(segments_[s].n);
        const size_t col = (pn - segments_[s].panel0) * kF16wNR, nc = std::min(kF16wNR, n - col);
        for (size_t r = r0; r < r1; r += mr)
          gemm(std::min(mr, r1 - r), k, x + r * k, k, w + pn * k * kF16wNR, y[s] + r * n + col, n, nc);
      }
    };
    ThreadPool* pool = &ctx.pool();
    if (rows == 1 && config_->gemv_streams) {
      // One row: each thread takes a contiguous share of the panels (two
      // shares a thread, taken dynamically) and walks it as the family's
      // stream count of sub-ranges side by side, each a long stream.
      run_streams(pool, panels_, config_->streams, worth,
                  [&](const size_t* panel, size_t live) { gemv_streams(x, w, y, panel, live); });
    } else if (!wide) {
      // A few rows (or one, on a family without a streams kernel): runs of
      // consecutive panels (one stream each) taken dynamically, so a small
      // projection splits over the threads too.
      split_runs(pool, panels_, div_up(kDecodeRunBytes, panel_bytes), worth, [&](size_t p0, size_t p1) {
        // The kernel prefetches 8 KiB ahead of its loads: ask for the run's
        // first 8 KiB now, or a short run starts on demand misses.
        const char* head = reinterpret_cast<const char*>(w + p0 * k * kF16wNR);
        const size_t head_bytes = std::min<size_t>(8192, (p1 - p0) * panel_bytes);
        for (size_t off = 0; off < head_bytes; off += 64) _mm_prefetch(head + off, _MM_HINT_T1);
        tiles(0, rows, p0, p1);
      });
    } else {
      // A prompt: row blocks × runs of panels, several tasks per thread.
      run_tiles(pool, rows, panels_, mr, worth, tiles);
    }
    if (half)
      for (size_t i = 0; i < outputs; ++i)
        vec_math_config().narrow(rows * static_cast<size_t>(segments_[i].n), y[i],
                                 ctx.output(static_cast<int>(i)).data<uint16_t>());
  }

  // One row against `live` panels read side by side, each into its own output.
  void gemv_streams(const float* x, const uint16_t* w, float* const* y, const size_t* panel, size_t live) const {
    const size_t k = static_cast<size_t>(k_);
    const uint16_t* b[qgemm_detail::kMaxDecodeStreams];
    float* c[qgemm_detail::kMaxDecodeStreams];
    size_t nc[qgemm_detail::kMaxDecodeStreams];
    for (size_t s = 0; s < live; ++s) {
      const size_t pn = panel[s];
      size_t g = 0;
      while (g + 1 < segments_.size() && segments_[g + 1].panel0 <= pn) ++g;
      const size_t n = static_cast<size_t>(segments_[g].n), col = (pn - segments_[g].panel0) * kF16wNR;
      b[s] = w + pn * k * kF16wNR;
      c[s] = y[g] + col;
      nc[s] = std::min(kF16wNR, n - col);
    }
    config_->gemv_streams(live, k, x, b, c, nc);
  }

  std::string describe() const override {
    std::string n = fmt::format("{}", segments_[0].n);
    for (size_t i = 1; i < segments_.size(); ++i) n += fmt::format("+{}", segments_[i].n);
    // One row, a few rows, a prompt.
    const std::string rows = config_->gemv_streams
                                 ? fmt::format("{} / {}", config_->gemv_streams_name, config_->gemm_name)
                                 : std::string(config_->gemm_name);
    return fmt::format("float16 weight {}x{} ({} MB packed), {} / {}", k_, n, bytes_ >> 20, rows, config_->wide_name);
  }

 private:
  // One weight: its N and where its panels start in the packed buffer.
  struct Segment {
    int64_t n = 0;
    size_t panel0 = 0;
  };
  // Siblings grouped on one input (graph/passes/sibling_matmul.cpp) are
  // few: q, k, v, or gate and up.
  static constexpr size_t kMaxOutputs = 16;

  int64_t n_total() const {
    int64_t n = 0;
    for (const Segment& seg : segments_) n += seg.n;
    return n;
  }

  // W [K, N] (or [N, K] when trans_b) into 16-column panels [N/16][K][16].
  void pack(const uint16_t* src, size_t n, bool trans_b, uint16_t* p) const {
    const size_t k = static_cast<size_t>(k_), panels = qgemm_detail::div_up(n, kF16wNR);
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
        for (size_t pn = 0; pn < panels; ++pn) {
          const size_t col = pn * kF16wNR;
          std::memcpy(p + (pn * k + i) * kF16wNR, src + i * n + col, std::min(kF16wNR, n - col) * sizeof(uint16_t));
        }
    }
  }

  const F16wGemmConfig* config_;
  int64_t k_ = 0;
  std::vector<Segment> segments_;
  size_t panels_ = 0, bytes_ = 0;
  std::shared_ptr<AlignedBuffer> packed_;  // [panels][K][16] float16 bits, the weights end to end
};

}  // namespace

void register_f16w_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "F16wMatMul", 1, 1, make_factory<F16wMatMulKernel>());
}

}  // namespace onebit
