// MatMul (ai.onnx 1-21; versions differ only in types): NumPy matmul with
// batch broadcasting.
//
// float32 runs through sgemm:
//   B constant and 2-D (every projection of an LLM) — read where it lies
//     (sgemm_weight: the model file's mapping, never copied, so loading
//     costs nothing and the weight is in memory once); stored transposed
//     (transB), or with --pack-weights (KernelOptions::map_weights off),
//     packed once at create instead. A's batch dims fold into M, so
//     [1, seq, 1024] · [1024, 2048] is one GEMM of seq rows (one row per
//     decode step: the memory-bound path).
//   B an activation with batch dims (attention's QKᵀ and AV, [1, heads, s, d])
//     — one sgemm per batch matrix, the batches spread over the threads, each
//     thread with its own slice of the workspace.
// float16 (a float16 export's attention products on activations; a
// constant float16 B is F16wMatMul's): the float32 path on the widened
// inputs, each output rounded once to float16.
// bfloat16 (a graph that computes in it, graph/passes/bf16_check.cpp): the same
// float32 path, each output rounded once to bfloat16; a constant 2-D
// bfloat16 B is widened and packed once at create (twice its bytes, read by
// the float32 decode kernels).
// Other types (f64, 32/64-bit integers) take a plain loop: integers wrap
// like two's complement.
#include <algorithm>
#include <memory>

#include "ops/dispatch.h"
#include "ops/matmul_shape.h"
#include "graph/op_registry.h"
#include "ops/sgemm.h"
#include "base/aligned_buffer.h"
#include "base/mapped_file.h"
#include "base/sizes.h"
#include "base/thread_pool.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

constexpr size_t kWorkspaceAlign = 64;
// Below this many flops a batched MatMul runs on the calling thread.
constexpr double kMinParallelFlops = 2e6;

size_t align_up(size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// bfloat16 <-> float32, n elements over the pool (null: this thread), per
// element base/dtype.h's conversion.
constexpr int64_t kConvertGrain = int64_t{1} << 14;
template <class F>
void over_pool(ThreadPool* pool, int64_t n, F&& part) {
  if (pool && n >= 2 * kConvertGrain) pool->parallel_for(n, kConvertGrain, part);
  else part(0, n);
}
void widen_bf16(ThreadPool* pool, int64_t n, const uint16_t* x, float* y) {
  over_pool(pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = bfloat16_to_float(x[i]);
  });
}
void narrow_bf16(ThreadPool* pool, int64_t n, const float* x, uint16_t* y) {
  over_pool(pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = float_to_bfloat16(x[i]);
  });
}

// The plain path: one output row per task.
template <class T>
void matmul_loop(const MatMulShape& s, const T* a, const T* b, T* y, ThreadPool& pool) {
  using D = DotArith<T>;
  const int64_t rows = s.batch * s.m;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, s.k * s.n));
  pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / s.m, i = r % s.m;
      const T* ar = a + s.a_offset(o) + i * s.k;
      const T* bm = b + s.b_offset(o);
      T* yr = y + r * s.n;
      for (int64_t j = 0; j < s.n; ++j) {
        typename D::Acc acc = 0;
        for (int64_t kk = 0; kk < s.k; ++kk) acc += D::load(ar[kk]) * D::load(bm[kk * s.n + j]);
        yr[j] = D::store(acc);
      }
    }
  });
}

class MatMulKernel : public Kernel {
 public:
  explicit MatMulKernel(const KernelInfo& info) : config_(&sgemm_config()) {
    // com.onebit::MatMul with transB = 1 (graph/matmul_transpose.cpp) reads
    // a constant 2-D B stored [N, K]: the packer transposes as it packs.
    trans_b_ = info.attrs().get_int("transB", 0) != 0;
    const Tensor* b = info.constant(1);
    if (trans_b_ && (!b || b->rank() != 2 || b->dtype() != DType::F32))
      fail("transB needs a constant float32 2-D B ('{}')", info.input_name(1));
    // A transposed B that another node also reads (the embedding table of a
    // tied LM head, which the Gather keeps) is read in place by dot
    // products: packing it would hold a second copy of the table.
    // Its pages are mapped now, as a weight read in place below: otherwise the
    // first prefill's LM head took ~20 ms of page faults over the 622 MB
    // table of the 0.6B shape (docs/BENCHMARK.md, "Float32 prefill beside
    // onnxruntime").
    if (trans_b_ && info.readers(1) > 1) {
      shared_bt_ = b;
      prefault_read(b->raw(), b->bytes());
      return;
    }
    if (b && b->dtype() == DType::BF16 && b->rank() == 2 && !trans_b_) {
      // Widened into a budgeted buffer, then packed, both on the session's threads.
      const AlignedBuffer wide(checked_mul_u64(static_cast<uint64_t>(b->size()), 4, "a bfloat16 weight widened"),
                               "a bfloat16 weight widened for packing");
      widen_bf16(info.pool(), b->size(), b->data<uint16_t>(), wide.as<float>());
      packed_ = std::make_unique<PackedB>(*config_, static_cast<size_t>(b->dim(0)), static_cast<size_t>(b->dim(1)),
                                          wide.as<float>(), static_cast<size_t>(b->dim(1)), false, info.pool(),
                                          info.options().huge_pages);
      bf16_weight_ = true;
      return;
    }
    if (b && b->dtype() == DType::F32 && b->rank() == 2) {
      const size_t rows = static_cast<size_t>(b->dim(0)), cols = static_cast<size_t>(b->dim(1));
      if (!trans_b_ && info.options().map_weights) {
        weight_ = *b;  // shares the storage (the file mapping) with the graph
        prefault_read(weight_.raw(), weight_.bytes());
        return;
      }
      const size_t k = trans_b_ ? cols : rows, n = trans_b_ ? rows : cols;
      packed_ = std::make_unique<PackedB>(*config_, k, n, b->data<float>(), cols, trans_b_, nullptr,
                                          info.options().huge_pages);
    }
  }

  bool packs_constant(int input) const override { return input == 1 && packed_ != nullptr; }
  uint64_t packed_bytes() const override { return packed_ ? packed_->bytes() : 0; }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (ctx.dtype(1) != t) fail("inputs are {} and {}; MatMul needs one type", dtype_name(t), dtype_name(ctx.dtype(1)));
    if (!matmul_dtype(t)) unsupported_dtype("MatMul", t);
    const MatMulShape s = matmul_shape(ctx.shape(0), b_shape(ctx.shape(1)));
    ctx.set_output(0, t, s.output_shape());
    if (t == DType::F32 && !shared_bt_) ctx.set_workspace(f32_workspace(s));
    if (t == DType::F16 || t == DType::BF16)
      ctx.set_workspace(f16_workspace(s, numel(ctx.shape(0)), uses_packed(s) ? 0 : numel(ctx.shape(1))));
  }

  void run(RunContext& ctx) override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    Tensor& Y = ctx.output(0);
    const MatMulShape s = matmul_shape(A.shape(), b_shape(B.shape()));
    if (s.batch == 0 || s.m == 0 || s.n == 0) return;
    if (shared_bt_) return run_dot(s, A.data<float>(), B.data<float>(), Y.data<float>(), ctx.pool());
    if (A.dtype() == DType::F32)
      return run_f32(s, A.data<float>(), B.data<float>(), Y.data<float>(), ctx.workspace(), ctx.pool());
    if (A.dtype() == DType::F16 || A.dtype() == DType::BF16) return run_f16(s, A, B, Y, ctx);
    dispatch_numeric(A.dtype(), "MatMul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      matmul_loop<T>(s, A.data<T>(), B.data<T>(), Y.data<T>(), ctx.pool());
    });
  }

  std::string describe() const override {
    if (weight_.raw())
      return fmt::format("f32 B [{},{}] read in place {} / {}", weight_.dim(0), weight_.dim(1), config_->gemm_name,
                         config_->axpy_name);
    if (shared_bt_)
      return fmt::format("f32 B^T [{},{}] read in place (shared) {}", shared_bt_->dim(0), shared_bt_->dim(1),
                         config_->dot_name);
    if (packed_)
      return fmt::format("{} B packed [{},{}] {} / {}", bf16_weight_ ? "bf16 (widened to f32)" : "f32", packed_->k(),
                         packed_->n(), config_->gemm_name, config_->gemv_name);
    return fmt::format("f32 {} / {}", config_->gemm_name, config_->gemv_name);
  }

 private:
  // The logical [K, N] shape of B.
  Shape b_shape(const Shape& b) const { return trans_b_ ? Shape{b[1], b[0]} : b; }

  // B is the packed constant, or else shared by every batch: then the
  // batches of A are rows of one GEMM.
  bool uses_packed(const MatMulShape& s) const {
    return packed_ && s.b_shared && static_cast<int64_t>(packed_->k()) == s.k &&
           static_cast<int64_t>(packed_->n()) == s.n;
  }
  // B is the constant kept in place.
  bool uses_weight(const MatMulShape& s) const {
    return weight_.raw() && s.b_shared && weight_.dim(0) == s.k && weight_.dim(1) == s.n;
  }

  // Block buffers of sgemm_weight: one per thread of the machine (a larger
  // --threads pool waits for them).
  static size_t weight_threads() { return static_cast<size_t>(ThreadPool::default_threads()); }

  // Workspace slices for batches run in parallel: as many as the machine
  // has threads (the session's pool is never larger by default).
  static int64_t slots(const MatMulShape& s) {
    return std::max<int64_t>(1, std::min<int64_t>(s.batch, ThreadPool::default_threads()));
  }

  size_t f32_workspace(const MatMulShape& s) const {
    const size_t m = static_cast<size_t>(s.m), n = static_cast<size_t>(s.n), k = static_cast<size_t>(s.k);
    const size_t rows = static_cast<size_t>(s.batch) * m;
    if (uses_packed(s)) return sgemm_packed_workspace(*packed_, rows, false);
    if (uses_weight(s)) return sgemm_weight_workspace(*config_, rows, n, k, weight_threads());
    if (s.b_shared) return sgemm_workspace(*config_, rows, n, k, false, false);
    return align_up(sgemm_workspace(*config_, m, n, k, false, false)) * static_cast<size_t>(slots(s));
  }

  // float16 A and B (two activations: a constant float16 B is
  // F16wMatMul's, graph/passes/f16_weight_matmul.cpp): the float32 GEMM on
  // the widened inputs, each output rounded once to float16, as F16wMatMul
  // and GqaMatMul compute theirs. After the widened A, B and Y, the float32
  // GEMM's own workspace. bfloat16 likewise (B none when packed at create).
  size_t f16_workspace(const MatMulShape& s, int64_t a, int64_t b) const {
    const int64_t y = checked_mul(checked_mul(s.batch, s.m, "the output"), s.n, "the output");
    return align_up(static_cast<size_t>(a) * 4) + align_up(static_cast<size_t>(b) * 4) +
           align_up(static_cast<size_t>(y) * 4) + f32_workspace(s);
  }
  void run_f16(const MatMulShape& s, const Tensor& A, const Tensor& B, Tensor& Y, RunContext& ctx) const {
    const bool bf16 = A.dtype() == DType::BF16, packed = uses_packed(s);
    const size_t need = f16_workspace(s, A.size(), packed ? 0 : B.size());
    if (need > ctx.workspace_bytes())
      fail("needs a {}-byte workspace for A {} and B {}, the plan has {}", need, shape_str(A.shape()),
           shape_str(B.shape()), ctx.workspace_bytes());
    const VecMathConfig& vm = vec_math_config();
    auto* at = static_cast<unsigned char*>(ctx.workspace());
    auto take = [&](int64_t elements) {
      auto* p = reinterpret_cast<float*>(at);
      at += align_up(static_cast<size_t>(elements) * 4);
      return p;
    };
    float* a = take(A.size());
    float* b = take(packed ? 0 : B.size());
    float* y = take(Y.size());
    const auto widen = [&](const Tensor& t, float* to) {
      if (bf16) widen_bf16(&ctx.pool(), t.size(), t.data<uint16_t>(), to);
      else vm.widen(static_cast<size_t>(t.size()), t.data<uint16_t>(), to);
    };
    widen(A, a);
    if (!packed) widen(B, b);
    run_f32(s, a, b, y, at, ctx.pool());
    if (bf16) narrow_bf16(&ctx.pool(), Y.size(), y, Y.data<uint16_t>());
    else vm.narrow(static_cast<size_t>(Y.size()), y, Y.data<uint16_t>());
  }

  void run_f32(const MatMulShape& s, const float* a, const float* b, float* y, void* workspace,
               ThreadPool& pool) const {
    const size_t m = static_cast<size_t>(s.m), n = static_cast<size_t>(s.n), k = static_cast<size_t>(s.k);
    if (uses_packed(s))
      return sgemm_packed(static_cast<size_t>(s.batch) * m, a, k, false, *packed_, nullptr, y, n, workspace, &pool);
    if (uses_weight(s))
      return sgemm_weight(*config_, static_cast<size_t>(s.batch) * m, n, k, a, k, weight_.data<float>(), n, nullptr, y,
                          n, workspace, weight_threads(), &pool);
    if (s.b_shared)
      return sgemm(*config_, static_cast<size_t>(s.batch) * m, n, k, a, k, false, b, n, false, nullptr, y, n,
                   workspace, &pool);

    // Batched B. Each batch matrix is one sgemm; with at least as many
    // batches as threads, each thread takes a contiguous run of batches and
    // its own workspace slot, and the sgemms themselves stay single-threaded.
    const size_t slot_bytes = align_up(sgemm_workspace(*config_, m, n, k, false, false));
    auto* ws = static_cast<unsigned char*>(workspace);
    auto one = [&](int64_t o, void* slot, ThreadPool* inner) {
      sgemm(*config_, m, n, k, a + s.a_offset(o), k, false, b + s.b_offset(o), n, false, nullptr,
            y + o * s.m * s.n, n, slot, inner);
    };
    const int64_t ranges = std::min<int64_t>({pool.size(), slots(s), s.batch});
    const double flops = 2.0 * double(s.batch) * double(m) * double(n) * double(k);
    if (ranges > 1 && s.batch >= pool.size() && flops >= kMinParallelFlops) {
      const int64_t per = (s.batch + ranges - 1) / ranges;
      pool.run(ranges, [&](int64_t r) {
        void* slot = ws ? ws + static_cast<size_t>(r) * slot_bytes : nullptr;
        for (int64_t o = r * per; o < std::min(s.batch, (r + 1) * per); ++o) one(o, slot, nullptr);
      });
    } else {
      for (int64_t o = 0; o < s.batch; ++o) one(o, ws, &pool);
    }
  }

  // Y = A·Bᵀ with B [N, K] in place: rows of A a few at a time (the dot
  // ukernel's limit), N split across the pool in runs of columns.
  void run_dot(const MatMulShape& s, const float* a, const float* bt, float* y, ThreadPool& pool) const {
    const size_t rows = static_cast<size_t>(s.batch * s.m), n = static_cast<size_t>(s.n), k = static_cast<size_t>(s.k);
    const F32DotUkernel dot = config_->dot;
    constexpr int64_t kColumns = 64;  // per task: 64 rows of B, 256 KiB at K = 1024
    pool.parallel_for(static_cast<int64_t>((n + kColumns - 1) / kColumns), 1, [&](int64_t c0, int64_t c1) {
      const size_t j0 = static_cast<size_t>(c0) * kColumns, j1 = std::min(n, static_cast<size_t>(c1) * kColumns);
      for (size_t r = 0; r < rows; r += kF32DotMaxRows)
        dot(std::min(kF32DotMaxRows, rows - r), j1 - j0, k, a + r * k, k, bt + j0 * k, k, y + r * n + j0, n, nullptr);
    });
  }

  const SgemmConfig* config_;
  const Tensor* shared_bt_ = nullptr;  // a transposed B another node reads, kept [N, K]
  bool trans_b_ = false;
  // A constant 2-D B packed in panels: float32 stored [N,K] (transB) or
  // read packed (--pack-weights), or bfloat16 [K,N] widened (bf16_weight_).
  std::unique_ptr<PackedB> packed_;
  bool bf16_weight_ = false;
  Tensor weight_;                    // constant 2-D float32 B [K,N], read in place
};

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add("", "MatMul", 1, kOnnxOpsetMax, make_factory<MatMulKernel>());
  r.add(kOneBitDomain, "MatMul", 1, 1, make_factory<MatMulKernel>());
}

}  // namespace onebit
