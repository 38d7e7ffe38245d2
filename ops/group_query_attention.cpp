// com.microsoft::GroupQueryAttention — onnxruntime's contrib op, as
// onnxruntime-genai's model builder writes one per decoder layer — and
// com.onebit::GroupQueryAttention, the same node after graph/passes/kv_state.cpp
// gave it the KV cache to keep (its present outputs dropped).
//
// Inputs (onnxruntime's ContribOperators.md, GroupQueryAttention):
//   0 query          [B, S, N·H], or Q|K|V packed [B, S, (N + 2·kvN)·H] when 1, 2 are absent
//   1 key, 2 value   [B, S, kvN·H] (optional)
//   3 past_key, 4 past_value  [B, kvN, P, H] (optional; P may exceed the past:
//                    a shared buffer, past_present_share_buffer)
//   5 seqlens_k      int32 [B]: each sequence's total length − 1
//   6 total_sequence_length  int32 scalar
//   7 cos_cache, 8 sin_cache  [max_position, R/2] (do_rotary; R ≤ H rotated dims)
//   9 position_ids   int64 [B, S] (optional; else derived from seqlens_k)
//  10 attention_bias [B|1, N|1, S, T] (optional)   11 head_sink [N] (optional)
// Attributes: num_heads N, kv_num_heads kvN, scale (0: 1/√H), softcap,
//   local_window_size (−1: none), do_rotary, rotary_interleaved,
//   smooth_softmax; qk_output must be 0.
// Outputs: 0 [B, S, N·H]; 1 present_key, 2 present_value [B, kvN, max(T, P), H].
// Types: query, key, value, the past and present, the rotary caches,
//   attention_bias and head_sink all float32, or all float16 (T; the
//   caches may stay float32) — onnxruntime-genai's builds for GPU execution
//   providers (`-e cuda`, `-e dml`) are float16 throughout. float16 is
//   computed as onnxruntime's CPU kernel computes it: widened to float32,
//   the rotated Q and K rounded to float16, the output rounded once.
//
// Per sequence b: T_b = seqlens_k[b] + 1 positions, of which the first
// P_b = T_b − S are the past (0 on the first prompt, S = total). Query s
// sits at position P_b + s and attends to keys t ≤ P_b + s (and, with a
// window W, t > P_b + s − W). Rotary rotates Q and the new K at those
// positions. The query heads of KV head g are g·rep … g·rep + rep − 1
// (rep = N / kvN).
//
// The products are ops/kv_gemm.h's (the cache float32, or float16 when the
// state is kept so): per decode step one Q·Kᵀ and one P·V of rep rows per
// KV head, reading the cache in place once; a prompt runs S rows per head.
// Softmax uses the vectorised exp.
//
// The KV state (com.onebit): the kernel keeps each layer's cache [kvN, C, H]
// with room for C positions and appends the S new ones in place; `past` is
// then read for its shape only and the session has no present outputs. It
// follows one sequence (batch 1): a past of 0 starts again.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/memory_budget.h"
#include "base/sizes.h"
#include "base/thread_pool.h"
#include "graph/op_registry.h"
#include "ops/kv_gemm.h"
#include "ops/kv_store.h"
#include "ops/op_util.h"
#include "ops/sgemm.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// Query rows whose scores are computed together, up to the most keys one
// of them reads (a causal prompt's staircase rounded to this many rows).
constexpr size_t kScoreRows = 32;

class GroupQueryAttentionKernel : public Kernel {
 public:
  explicit GroupQueryAttentionKernel(const KernelInfo& info)
      : state_(info.node().domain == kOneBitDomain),
        kv_config_(kv_gemm_config()),
        k_(info.options().kv_dtype),
        v_(info.options().kv_dtype) {
    const Attributes& a = info.attrs();
    heads_ = a.get_int("num_heads", 0);
    kv_heads_ = a.get_int("kv_num_heads", 0);
    if (heads_ <= 0 || kv_heads_ <= 0 || heads_ % kv_heads_ != 0)
      fail("attributes num_heads = {} and kv_num_heads = {}: expected both positive, num_heads a multiple of "
           "kv_num_heads",
           heads_, kv_heads_);
    scale_ = a.get_float("scale", 0.0f);
    softcap_ = a.get_float("softcap", 0.0f);
    if (softcap_ < 0) fail("attribute softcap is {}, expected 0 (none) or positive", softcap_);
    window_ = a.get_int("local_window_size", -1);
    rotary_ = a.get_int("do_rotary", 0) != 0;
    interleaved_ = a.get_int("rotary_interleaved", 0) != 0;
    smooth_ = a.get_int("smooth_softmax", 0) != 0;
    if (const int64_t qk = a.get_int("qk_output", 0); qk != 0)
      fail("attribute qk_output is {}, expected 0: the attention scores are not an output 1bit writes", qk);
    packed_ = !info.has_input(1);
    if (packed_ != !info.has_input(2)) fail("inputs key and value must be given together, or neither (packed QKV)");
    if (rotary_ && (!info.has_input(7) || !info.has_input(8)))
      fail("attribute do_rotary is 1 but input {} is missing", info.has_input(7) ? "sin_cache" : "cos_cache");
    if (!info.has_input(5) || !info.has_input(6))
      fail("input {} is required", info.has_input(5) ? "total_sequence_length" : "seqlens_k");
    if (state_ && (info.has_output(1) || info.has_output(2)))
      fail("a node that keeps the KV state has no present outputs");
  }

  // Kept state: the past is read for its shape only.
  bool needs_input_data(int input) const override { return !(state_ && (input == 3 || input == 4)); }

  void reshape(ReshapeContext& ctx) override {
    Operand in[kInputs];
    for (int i = 0; i < kInputs; ++i)
      if (ctx.has_input(i)) in[i] = {true, ctx.dtype(i), &ctx.shape(i)};
    // The total length: known when it derives from input shapes (the
    // attention mask's), else planned at run time.
    const Checked c = check(in, ctx.value(6));
    const DType t = ctx.dtype(0);
    if (state_) {
      k_.reserve(kv_heads_, c.d, c.t_max);  // the decode steps then grow nothing
      v_.reserve(kv_heads_, c.d, c.t_max);
    } else {
      for (int o : {1, 2})
        if (ctx.has_output(o)) ctx.set_output(o, t, {c.b, kv_heads_, c.t_max, c.d});
    }
    ctx.set_output(0, t, {c.b, c.s, heads_ * c.d});
    const Plan p = plan(c.b, c.s, c.d, c.t_max, t == DType::F16, ctx.has_input(10));
    ctx.set_workspace(p.workspace(static_cast<size_t>(ThreadPool::default_threads())));
  }

  // With the KV state kept its only output is [b, s, heads·d], whatever the
  // total length (a value) is: a plan may grow it, and run() checks what
  // reshape() does (check() below). Without, the present outputs' length
  // is that value.
  bool follows_growth() const override { return state_; }

  void run(RunContext& ctx) override {
    // What reshape checked, again (Kernel::follows_growth).
    Operand in[kInputs];
    for (int i = 0; i < kInputs; ++i)
      if (ctx.has_input(i)) in[i] = {true, ctx.input(i).dtype(), &ctx.input(i).shape()};
    const Checked c = check(in, ctx.input(6));
    // The workspace reshape sized: for the same total length.
    const Plan pl = plan(c.b, c.s, c.d, c.t_max, ctx.input(0).dtype() == DType::F16, ctx.has_input(10));
    {
      const DType t = ctx.input(0).dtype();
      for (int o = 0; o < 3; ++o) {
        if (!ctx.has_output(o)) continue;
        const Tensor& y = ctx.output(o);
        const int64_t want[4] = {c.b, o == 0 ? c.s : kv_heads_, o == 0 ? heads_ * c.d : c.t_max, c.d};
        if (y.dtype() != t || y.rank() != (o == 0 ? 3 : 4) || !std::equal(want, want + y.rank(), y.shape().begin()))
          fail("output {} is bound as {} {}, expected {} [{},{},{}{}]", o, dtype_name(y.dtype()), shape_str(y.shape()),
               dtype_name(t), want[0], want[1], want[2], o == 0 ? "" : fmt::format(",{}", want[3]));
      }
      const size_t need = pl.workspace(static_cast<size_t>(ThreadPool::default_threads()));
      if (need > ctx.workspace_bytes())
        fail("needs a {}-byte workspace for {} positions, the plan has {}", need, c.t_max, ctx.workspace_bytes());
    }
    const Tensor& Q = ctx.input(0);
    const int64_t b = c.b, s = c.s, d = c.d, rep = heads_ / kv_heads_;
    const int64_t past_buf = ctx.has_input(3) ? ctx.input(3).dim(2) : 0;
    const int64_t total = c.total;
    const int32_t* seqlens = ctx.input(5).data<int32_t>();
    const bool first_prompt = s == total;
    const bool half = Q.dtype() == DType::F16;
    const DType t_cache = half ? DType::F16 : DType::F32;
    const size_t es = half ? 2 : 4;  // bytes of a query, key, value or present element
    // Positions of sequence b: past P_b, total T_b.
    std::vector<int64_t> past(static_cast<size_t>(b)), len(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) {
      const int64_t t = int64_t{seqlens[i]} + 1;
      const int64_t p = first_prompt ? 0 : t - s;
      if (t < 1 || t > total || p < 0 || (!first_prompt && p + s > total))
        fail("seqlens_k[{}] = {} does not fit a sequence of {} new positions in a total of {}", i, seqlens[i], s, total);
      past[static_cast<size_t>(i)] = p;
      len[static_cast<size_t>(i)] = first_prompt ? std::min(t, s) : t;
    }

    // Where the cache lives: the kept state, or the present outputs.
    unsigned char *kc, *vc;
    int64_t head_stride;  // elements between KV heads
    int64_t batch_stride;
    if (state_) {
      const int64_t p = past[0];
      k_.continue_at(p);
      v_.continue_at(p);
      if (past_buf != p)
        fail("past_key declares {} positions, seqlens_k says {}: with the KV state kept the past is its length",
             past_buf, p);
      k_.reserve(kv_heads_, d, p + s);
      v_.reserve(kv_heads_, d, p + s);
      head_stride = k_.capacity() * d;
      batch_stride = kv_heads_ * head_stride;
      kc = vc = nullptr;  // the state's rows: k_.head(g), v_.head(g)
    } else {
      Tensor& pk = ctx.output(1);
      Tensor& pv = ctx.output(2);
      const int64_t tp = pk.dim(2);
      head_stride = tp * d;
      batch_stride = kv_heads_ * head_stride;
      kc = static_cast<unsigned char*>(pk.raw());
      vc = static_cast<unsigned char*>(pv.raw());
      // The past as it is (all P rows: with a shared buffer its tail belongs to the caller).
      if (past_buf > 0) {
        const int64_t rows = std::min(past_buf, tp);
        for (int o : {3, 4}) {
          const auto* src = static_cast<const unsigned char*>(ctx.input(o).raw());
          unsigned char* dst = o == 3 ? kc : vc;
          for (int64_t h = 0; h < b * kv_heads_; ++h)
            std::memcpy(dst + static_cast<size_t>(h * head_stride) * es,
                        src + static_cast<size_t>(h * past_buf * d) * es, static_cast<size_t>(rows * d) * es);
        }
      }
    }
    for (int64_t i = 0; i < b; ++i)
      if (past[static_cast<size_t>(i)] + s > (state_ ? k_.capacity() : head_stride / d))
        fail("sequence {} needs {} positions, the cache has {}", i, past[static_cast<size_t>(i)] + s,
             state_ ? k_.capacity() : head_stride / d);

    auto* ws = static_cast<unsigned char*>(ctx.workspace());
    float* qr = reinterpret_cast<float*>(ws);  // [B, S, N, H]: rotated queries
    // float16: the inputs widened, and the output before its rounding.
    float* wide_in = reinterpret_cast<float*>(ws + pl.q_bytes);
    float* wide_out = reinterpret_cast<float*>(ws + pl.q_bytes + pl.in_bytes);
    unsigned char* slots = ws + pl.q_bytes + pl.in_bytes + pl.out_bytes;

    // Rotate Q into the workspace and write the new K (rotated) and V at
    // positions P_b … P_b + S − 1 of the cache.
    const int64_t q_row = Q.dim(2), kv_row = packed_ ? q_row : kv_heads_ * d;
    const VecMathConfig& vm = vec_math_config();
    const float* qin = Q.data<float>();
    const float *kin = nullptr, *vin = nullptr;
    if (half) {
      const size_t qn = static_cast<size_t>(b * s * q_row), kvn = packed_ ? 0 : static_cast<size_t>(b * s * kv_row);
      vm.widen(qn, Q.data<uint16_t>(), wide_in);
      if (!packed_) {
        vm.widen(kvn, ctx.input(1).data<uint16_t>(), wide_in + qn);
        vm.widen(kvn, ctx.input(2).data<uint16_t>(), wide_in + qn + kvn);
      }
      qin = wide_in;
      kin = packed_ ? qin + heads_ * d : wide_in + qn;
      vin = packed_ ? qin + (heads_ + kv_heads_) * d : wide_in + qn + kvn;
    } else {
      kin = packed_ ? qin + heads_ * d : ctx.input(1).data<float>();
      vin = packed_ ? qin + (heads_ + kv_heads_) * d : ctx.input(2).data<float>();
    }
    const int64_t* pos_ids = ctx.has_input(9) ? ctx.input(9).data<int64_t>() : nullptr;
    const Tensor* cos = rotary_ ? &ctx.input(7) : nullptr;
    const Tensor* sin = rotary_ ? &ctx.input(8) : nullptr;
    const int64_t rot = rotary_ ? cos->dim(1) : 0, max_pos = rotary_ ? cos->dim(0) : 0;
    ctx.pool().parallel_for(b * s, std::max<int64_t>(1, 64 / std::max<int64_t>(1, heads_)), [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(d)), cs(static_cast<size_t>(2 * rot));
      std::vector<uint16_t> bits(half ? static_cast<size_t>(d) : 0);
      // float16: x rounded to float16 in place (the rotated Q and K, as
      // onnxruntime stores them), its bits in `bits`.
      auto round16 = [&](float* x) {
        if (!half) return;
        vm.narrow(static_cast<size_t>(d), x, bits.data());
        vm.widen(static_cast<size_t>(d), bits.data(), x);
      };
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t bi = r / s, si = r % s;
        const int64_t pos = pos_ids ? pos_ids[r] : past[static_cast<size_t>(bi)] + si;
        if (rotary_ && (pos < 0 || pos >= max_pos))
          fail("position {} is outside the rotary cache of {} positions", pos, max_pos);
        const float *cr = nullptr, *sr = nullptr;
        if (rotary_) {
          cr = floats_at(*cos, pos * rot, rot, cs.data());
          sr = floats_at(*sin, pos * rot, rot, cs.data() + rot);
        }
        for (int64_t n = 0; n < heads_; ++n) {
          float* qd = qr + (r * heads_ + n) * d;
          rotate(qin + r * q_row + n * d, qd, d, cr, sr, rot);
          round16(qd);
        }
        const int64_t at = past[static_cast<size_t>(bi)] + si;
        for (int64_t g = 0; g < kv_heads_; ++g) {
          // K rotated into a row, then stored as the state or the present keeps it.
          rotate(kin + r * kv_row + g * d, row.data(), d, cr, sr, rot);
          round16(row.data());
          const float* v = vin + r * kv_row + g * d;
          if (state_) {  // batch 1
            k_.put(g, at, row.data(), 1);
            v_.put(g, at, v, 1);
            continue;
          }
          const size_t off = static_cast<size_t>(bi * batch_stride + g * head_stride + at * d) * es;
          if (half) {
            std::memcpy(kc + off, bits.data(), static_cast<size_t>(d) * 2);
            vm.narrow(static_cast<size_t>(d), v, reinterpret_cast<uint16_t*>(vc + off));
          } else {
            std::memcpy(kc + off, row.data(), static_cast<size_t>(d) * 4);
            std::memcpy(vc + off, v, static_cast<size_t>(d) * 4);
          }
        }
      }
    });
    if (state_) k_.length = v_.length = past[0] + s;

    // Attention, one task per (sequence, KV head) when decoding (rep rows),
    // else per (sequence, head) (S rows).
    const bool grouped = s == 1;
    const int64_t per_b = grouped ? kv_heads_ : heads_;
    const int64_t tasks = b * per_b;
    const float scale = scale_ > 0 ? scale_ : 1.0f / std::sqrt(static_cast<float>(d));
    const Tensor* bias = ctx.has_input(10) ? &ctx.input(10) : nullptr;
    const Shape bias_shape = bias ? bias->shape() : Shape{};
    std::vector<float>& sink = sink_;  // head_sink as float32 (kept across runs: no allocation a step)
    sink.resize(ctx.has_input(11) ? static_cast<size_t>(heads_) : 0);
    if (!sink.empty()) {
      const float* h = floats_at(ctx.input(11), 0, heads_, sink.data());
      if (h != sink.data()) std::copy(h, h + heads_, sink.data());
    }
    float* out = half ? wide_out : ctx.output(0).data<float>();
    const int64_t out_row = heads_ * d;
    auto one = [&](int64_t task, unsigned char* slot, ThreadPool* inner) {
      const int64_t bi = task / per_b, u = task % per_b;
      const int64_t g = grouped ? u : u / rep;
      const int64_t p = past[static_cast<size_t>(bi)], t = p + s;
      const int64_t valid_end = len[static_cast<size_t>(bi)];  // keys past this are padding
      const size_t m = static_cast<size_t>(grouped ? rep : s);
      const int64_t head0 = grouped ? g * rep : u;
      // Rows: grouped, the rep heads of one position (H apart); else the S positions of one head (N·H apart).
      const float* a = qr + (bi * s * heads_ + head0) * d;
      const size_t lda = static_cast<size_t>(grouped ? d : heads_ * d);
      const size_t head_at = static_cast<size_t>(bi * batch_stride + g * head_stride) * es;
      const KvRows kb = state_ ? k_.head(g) : KvRows{kc + head_at, t_cache};
      const KvRows vb = state_ ? v_.head(g) : KvRows{vc + head_at, t_cache};
      float* scores = reinterpret_cast<float*>(slot);
      void* gemm_ws = slot + pl.scores_bytes;
      float* bias_row = reinterpret_cast<float*>(slot + pl.scores_bytes + pl.gemm_bytes);  // a float16 bias widened
      const size_t tn = static_cast<size_t>(t);
      // Row `row` reads keys [lo, hi) (softmax_row zeroes the rest).
      auto keys_end = [&](size_t row) {
        const int64_t qpos = p + (grouped ? 0 : static_cast<int64_t>(row));
        const int64_t hi = std::min(qpos, valid_end - 1) + 1;
        return first_prompt ? std::min(hi, valid_end) : hi;
      };
      // Scores only for keys some row of a block reads: a prompt's causal
      // half is never computed (each score is the same however the rows and
      // keys are split: ops/kv_gemm.h).
      for (size_t r0 = 0; r0 < m; r0 += kScoreRows) {
        const size_t r1 = std::min(m, r0 + kScoreRows);
        int64_t e = 0;
        for (size_t row = r0; row < r1; ++row) e = std::max(e, keys_end(row));
        if (e > 0)
          kv_scores(kv_config_, r1 - r0, static_cast<size_t>(std::min(e, t)), static_cast<size_t>(d), a + r0 * lda,
                    lda, kb, scores + r0 * tn, tn, inner);
      }
      for (size_t row = 0; row < m; ++row) {
        const int64_t si = grouped ? 0 : static_cast<int64_t>(row);
        const int64_t head = grouped ? head0 + static_cast<int64_t>(row) : head0;
        const int64_t qpos = p + si;
        const int64_t hi = keys_end(row);  // keys [lo, hi)
        int64_t lo = window_ > 0 ? std::max<int64_t>(0, qpos + 1 - window_) : 0;
        float* sr = scores + row * tn;
        const float* br = nullptr;
        if (bias) {
          const int64_t at = bias_offset(bias_shape, bi, head, si);
          br = floats_at(*bias, at, t, bias_row);
        }
        const bool has_sink = !sink.empty();
        const float sink_at = has_sink ? sink[static_cast<size_t>(head)] : (smooth_ ? 0.0f : NAN);
        softmax_row(sr, tn, lo, std::max(lo, hi), scale, br, sink_at, has_sink || smooth_);
      }
      float* o = out + (bi * s) * out_row + head0 * d;
      kv_mix(kv_config_, m, tn, static_cast<size_t>(d), scores, tn, vb, o, static_cast<size_t>(grouped ? d : out_row),
             gemm_ws, inner);
    };
    ThreadPool& pool = ctx.pool();
    run_task_ranges(pool, tasks, [&](int64_t task, int64_t r, ThreadPool* inner) {
      one(task, slots + static_cast<size_t>(r) * pl.slot, inner);
    });
    if (half) vm.narrow(static_cast<size_t>(b * s * out_row), out, ctx.output(0).data<uint16_t>());
  }

  std::string describe() const override {
    return fmt::format("GQA {} heads / {} KV heads{}{}, {}", heads_, kv_heads_, rotary_ ? ", rotary" : "",
                       state_ ? fmt::format(", KV state ({}) {} of {} positions", dtype_name(k_.dtype()), k_.length,
                                            k_.capacity())
                              : "",
                       kv_config_.kv->qk_name);
  }

 private:
  struct Plan {
    size_t q_bytes = 0;       // rotated queries
    size_t in_bytes = 0;      // float16: query, key and value widened
    size_t out_bytes = 0;     // float16: the output before its rounding
    size_t scores_bytes = 0;  // one task's scores
    size_t gemm_bytes = 0;    // one task's P·V workspace
    size_t slot = 0;          // one thread's scores, GEMM workspace and (float16) widened bias row
    size_t workspace(size_t threads) const { return q_bytes + in_bytes + out_bytes + slot * threads; }
  };

  static constexpr int kInputs = 12;
  // An input's dtype and shape as reshape() or run() sees it.
  struct Operand {
    bool present = false;
    DType dtype = DType::Undefined;
    const Shape* shape = nullptr;
  };
  struct Checked {
    int64_t b, s, d;  // batch, new positions, head size
    int64_t total;    // total_sequence_length
    int64_t t_max;    // positions the cache holds after this step
  };

  // What reshape() checks and run() checks again (Kernel::follows_growth):
  // dtypes, every input's shape against the query's, the total length
  // (`total_input`, input 6's value) against them.
  Checked check(const Operand (&in)[kInputs], const Tensor& total_input) const {
    const DType t = in[0].dtype;
    if (t != DType::F32 && t != DType::F16)
      fail("input 0 (query) is {}, expected float32 or float16", dtype_name(t));
    for (int i : {1, 2, 3, 4, 10, 11})
      if (in[i].present && in[i].dtype != t)
        fail("input {} ({}) is {}, expected {} as the query", i, input_name(i), dtype_name(in[i].dtype), dtype_name(t));
    for (int i : {7, 8})
      if (in[i].present && in[i].dtype != t && in[i].dtype != DType::F32)
        fail("input {} ({}) is {}, expected {} or float32", i, input_name(i), dtype_name(in[i].dtype), dtype_name(t));
    for (int i : {5, 6})
      if (in[i].dtype != DType::I32) fail("input {} ({}) is {}, expected int32", i, input_name(i), dtype_name(in[i].dtype));
    const Shape& q = *in[0].shape;
    if (q.size() != 3) fail("input query has shape {}, expected [batch, sequence, hidden]", shape_str(q));
    const int64_t b = q[0], s = q[1];
    const int64_t width = packed_ ? heads_ + 2 * kv_heads_ : heads_;
    if (q[2] % width != 0)
      fail("input query's last dim {} is not a multiple of {} heads{}", q[2], width, packed_ ? " (packed Q, K, V)" : "");
    const int64_t d = q[2] / width;
    auto is = [](const Shape& x, std::initializer_list<int64_t> want) {
      return x.size() == want.size() && std::equal(want.begin(), want.end(), x.begin());
    };
    if (!packed_)
      for (int i : {1, 2})
        if (!is(*in[i].shape, {b, s, kv_heads_ * d}))
          fail("input {} ({}) has shape {}, expected [{}, {}, {}]", i, input_name(i), shape_str(*in[i].shape), b, s,
               kv_heads_ * d);
    int64_t past_len = 0;
    if (in[3].present != in[4].present) fail("inputs past_key and past_value must be given together");
    if (in[3].present) {
      for (int i : {3, 4}) {
        const Shape& p = *in[i].shape;
        if (p.size() != 4 || p[0] != b || p[1] != kv_heads_ || p[3] != d)
          fail("input {} ({}) has shape {}, expected [{}, {}, past, {}]", i, input_name(i), shape_str(p), b, kv_heads_, d);
      }
      if (*in[3].shape != *in[4].shape)
        fail("past_key {} and past_value {} differ in shape", shape_str(*in[3].shape), shape_str(*in[4].shape));
      past_len = (*in[3].shape)[2];
    }
    if (numel(*in[5].shape) != b) fail("input seqlens_k has shape {}, expected [{}]", shape_str(*in[5].shape), b);
    if (numel(*in[6].shape) != 1)
      fail("input total_sequence_length has shape {}, expected a scalar", shape_str(*in[6].shape));
    const int64_t total = *total_input.data<int32_t>();
    if (rotary_) {
      const Shape& c = *in[7].shape;
      if (c.size() != 2 || *in[8].shape != c || 2 * c[1] > d || c[1] == 0)
        fail("cos_cache {} and sin_cache {} must both be [max_position, rotary_dim / 2] with rotary_dim ≤ head size {}",
             shape_str(c), shape_str(*in[8].shape), d);
    }
    if (in[9].present && !is(*in[9].shape, {b, s}))
      fail("input position_ids has shape {}, expected [{}, {}]", shape_str(*in[9].shape), b, s);
    if (in[11].present && numel(*in[11].shape) != heads_)
      fail("input head_sink has shape {}, expected [{}]", shape_str(*in[11].shape), heads_);
    if (total < s) fail("total_sequence_length {} is less than the sequence length {}", total, s);
    if (state_ && b != 1) fail("the kept KV state follows one sequence; the batch is {}", b);
    if (in[10].present) {
      const Shape& m = *in[10].shape;
      if (m.size() != 4 || (m[0] != 1 && m[0] != b) || (m[1] != 1 && m[1] != heads_) || m[2] != s || m[3] < total)
        fail("input attention_bias has shape {}, expected [{} or 1, {} or 1, {}, ≥ {}]", shape_str(m), b, heads_, s,
             total);
    }
    return {b, s, d, total, state_ ? std::max(total, past_len + s) : std::max(total, past_len)};
  }

  Plan plan(int64_t b, int64_t s, int64_t d, int64_t t, bool half, bool bias) const {
    Plan p;
    p.q_bytes = align64(static_cast<size_t>(b * s * heads_ * d) * sizeof(float));
    if (half) {
      const int64_t row = (heads_ + 2 * kv_heads_) * d;  // Q, K and V, packed or not
      p.in_bytes = align64(static_cast<size_t>(b * s * row) * sizeof(float));
      p.out_bytes = p.q_bytes;
    }
    const size_t m = static_cast<size_t>(s == 1 ? heads_ / kv_heads_ : s);
    const size_t tn = static_cast<size_t>(std::max<int64_t>(t, 1)), dn = static_cast<size_t>(d);
    p.scores_bytes = align64(m * tn * sizeof(float));
    const DType cache = state_ ? k_.dtype() : (half ? DType::F16 : DType::F32);
    p.gemm_bytes = align64(kv_mix_workspace(kv_config_, m, tn, dn, cache));
    p.slot = p.scores_bytes + p.gemm_bytes + (half && bias ? align64(tn * sizeof(float)) : 0);
    return p;
  }

  // `count` elements of a float32 or float16 tensor from element `first`,
  // as float32: where they are, or widened into `buf`.
  static const float* floats_at(const Tensor& x, int64_t first, int64_t count, float* buf) {
    if (x.dtype() == DType::F32) return x.data<float>() + first;
    vec_math_config().widen(static_cast<size_t>(count), x.data<uint16_t>() + first, buf);
    return buf;
  }

  // y = x with its first 2·half dims rotated by (cos, sin); the rest copied.
  void rotate(const float* x, float* y, int64_t d, const float* c, const float* sn, int64_t half) const {
    if (!c) {
      std::memcpy(y, x, static_cast<size_t>(d) * sizeof(float));
      return;
    }
    if (interleaved_) {
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = x[2 * i], x2 = x[2 * i + 1];
        y[2 * i] = x1 * c[i] - x2 * sn[i];
        y[2 * i + 1] = x2 * c[i] + x1 * sn[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = x[i], x2 = x[i + half];
        y[i] = x1 * c[i] - x2 * sn[i];
        y[i + half] = x2 * c[i] + x1 * sn[i];
      }
    }
    for (int64_t i = 2 * half; i < d; ++i) y[i] = x[i];
  }

  static int64_t bias_offset(const Shape& m, int64_t bi, int64_t head, int64_t si) {
    const int64_t b = m[0] == 1 ? 0 : bi, h = m[1] == 1 ? 0 : head;
    return ((b * m[1] + h) * m[2] + si) * m[3];
  }

  // Row of scores [0, n): keys [lo, hi) are attended (scaled, soft-capped,
  // biased), the rest get weight 0. With a sink (head_sink, or 0 for
  // smooth_softmax) the denominator has one more term, e^(sink − max).
  void softmax_row(float* r, size_t n, int64_t lo, int64_t hi, float scale, const float* bias, float sink,
                   bool has_sink) const {
    for (int64_t j = lo; j < hi; ++j) {
      float v = r[j] * scale;
      if (softcap_ > 0) v = softcap_ * std::tanh(v / softcap_);
      if (bias) v += bias[j];
      r[j] = v;
    }
    float mx = has_sink ? sink : -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j < hi; ++j) mx = std::max(mx, r[j]);
    for (int64_t j = lo; j < hi; ++j) r[j] -= mx;
    if (hi > lo) vec_math_config().exp(static_cast<size_t>(hi - lo), r + lo, r + lo);
    double sum = has_sink ? std::exp(static_cast<double>(sink - mx)) : 0.0;
    for (int64_t j = lo; j < hi; ++j) sum += r[j];
    const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.0f;
    for (int64_t j = lo; j < hi; ++j) r[j] *= inv;
    for (int64_t j = 0; j < lo; ++j) r[j] = 0;
    for (size_t j = static_cast<size_t>(std::max<int64_t>(hi, 0)); j < n; ++j) r[j] = 0;
  }

  static const char* input_name(int i) {
    static const char* names[] = {"query",     "key",       "value",        "past_key",       "past_value", "seqlens_k",
                                  "total_sequence_length", "cos_cache", "sin_cache", "position_ids", "attention_bias",
                                  "head_sink"};
    return i >= 0 && i < 12 ? names[i] : "?";
  }

  bool state_;
  KvGemmConfig kv_config_;
  int64_t heads_ = 0, kv_heads_ = 0, window_ = -1;
  float scale_ = 0, softcap_ = 0;
  bool rotary_ = false, interleaved_ = false, smooth_ = false, packed_ = false;
  KvStore k_, v_;  // the kept state (com.onebit)
  std::vector<float> sink_;  // head_sink widened, a run's
};

}  // namespace

void register_group_query_attention_ops(OpRegistry& r) {
  r.add(kMicrosoftDomain, "GroupQueryAttention", 1, 1, make_factory<GroupQueryAttentionKernel>());
  r.add(kOneBitDomain, "GroupQueryAttention", 1, 1, make_factory<GroupQueryAttentionKernel>());
}

}  // namespace onebit
