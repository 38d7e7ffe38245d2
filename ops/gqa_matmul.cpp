// com.onebit::GqaMatMul(A, KV, expand_shape, reshape_shape), written by
// graph/gqa_fusion.cpp: the attention product of A [b,h,S,X] with KV heads
// [b,kvh,T,d] repeated rep = h/kvh times, without the repeat. The repeat is
// Expand to `expand_shape` and Reshape to `reshape_shape` (inputs 2 and 3),
// checked each run, or attribute kv_repeat = rep when the pass proved those
// shapes the cache's dims with rep for every size (checked the same way).
//   transB = 1: A = Q [b,h,S,d]  ->  Q·Kᵀ [b,h,S,T]
//   transB = 0: A = P [b,h,S,T]  ->  P·V  [b,h,S,d]
// The rep query heads of one KV head are consecutive rows of A, so each KV
// head is one GEMM of rep·S rows that reads its K or V once.
// With a fifth input (graph/kv_state.cpp), KV is a KvAppend state: heads
// lie input-4 elements apart instead of T·d, and KV may be float16
// or int8 (KernelOptions::kv_dtype; ops/kv_gemm.h). Without inputs 2 and 3 (the
// kv-state pass on multi-head attention) rep is 1. A float16 A (a float16
// export) is widened, the products run as for float32 over the float16 or
// float32 KV, and each output is rounded once to float16: the same with the
// KV state as without it, bit for bit.
// With a sixth input (graph/passes/masked_scores.cpp), Q·Kᵀ is followed by
// ·score_scale, + that mask and a Softmax over the keys: a row's trailing
// run of masked keys (the causal half of a prompt) is left out and written
// as 0 when Softmax's output provably stays the same (kMaskedAt below; a
// float16 export's chain with the fused Softmax: kHalfMaskedAt).
// With the attribute softmax = 1 as well (graph/passes/masked_scores.cpp,
// the second fusion there), the node is that whole chain: each block of
// rows gets ·score_scale, + mask and the Softmax row kernel while it is in
// cache, the same float operations in the same order as the three nodes it
// replaces, so its output is theirs bit for bit. With nan_to_zero = 1 the
// Softmax's NaNs (a row masked whole) are written as +0, as the
// Where(IsNaN(P), 0, P) the TorchScript exporter writes after it does.
// With mask_any_shape = 1 (a graph that does not declare the mask's
// shape) a mask that turns out not to be rows over the scores is not an
// error: the node then computes the scores whole and the chain as its
// nodes would (a float16 export's each rounding to float16), broadcasting
// the mask (ops/broadcast.h) and taking the Softmax over the last axis of
// the sum.
// With mask_to_keys = 1 as well (graph/passes/masked_scores.cpp, the
// third fusion there) input 5 is the mask M before the Slice that cut its
// axis mask_keys_axis to the keys' count T (transformers'
// causal_mask[:, :, :, :T]): the node uses M with that axis cut to
// min(its dim, T), as that Slice gives it. Cut along the last axis (or not
// cut at all) its rows are read in place; else the cut is copied.
// With inputs 6 and 7 (graph/passes/scores_mix.cpp: a fused chain over the
// KV state whose P only the P·V GqaMatMul read), the node is the attention
// whole: input 6 the values' KV state V [b,kvh,T,dv], input 7 its heads'
// stride, the output P·V [b,h,S,dv] (run_mix), of A's dtype. A float16
// export's A is widened, each block's P rounded to float16 and widened
// again (the scores node's output, the P·V node's input) and the output
// rounded once, as the two nodes round theirs. Each block of
// kSkipRows rows gets its scores, its chain and its P·V while the block's P
// is in a thread's slot, where the two nodes wrote the whole P [b,h,S,T] to
// memory and read it back; every KV head's blocks are one list the threads
// take from. The same kernels on the same rows: bit for bit the two nodes'
// output (P·V multiplies a row up to its block's kept keys, or past the
// last value row holding a value that is not finite, as kv_mix does in the
// P·V node; ops/kv_gemm.h). A mask of undeclared shape that turns out not
// to be rows runs P whole, then P·V (run_mix_whole).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "graph/op_registry.h"
#include "ops/kv_gemm.h"
#include "ops/op_util.h"
#include "ops/sgemm.h"
#include "ops/softmax.h"
#include "base/sizes.h"
#include "base/thread_pool.h"
#include "quant/ukernels/kv_ukernels.h"

namespace onebit {

namespace {

// Leaving out the scores of a row's trailing masked keys (the causal half
// of a prompt). A mask value at or below kMaskedAt masks its key. Unfused,
// such a score becomes
// fl(fl(q·k·s) + m) ≤ kMaskedAt + B, where B = |q|·max|k|·|s| (checked
// below kScoreBound); left out, it becomes m itself. The row's last kept key
// has a mask value of at least kKeptFloor, so its score is above
// kKeptFloor − B: the row's maximum is the same either way, both versions of
// a left-out score lie more than 87.34 below it, and the vectorised exp
// gives exactly 0 for both (quant/ukernels/f32_vexp_ukernels.h). Softmax's
// output is then the same bit for bit. NaN masks count as kept; a non-finite
// or huge q or k makes B fail the check, and the row is computed whole.
constexpr float kMaskedAt = -1e30f;
constexpr float kKeptFloor = -1e28f;
constexpr double kScoreBound = 1e29;
// The same for a float16 export's chain (each step rounded to float16:
// y = h(h(h(q·k)·s) + m)), whose masks hold float16's lowest, -65504.
// With |q|·max|k| and B both under kHalfScoreBound, h(q·k) is finite, a
// left-out score (mask ≤ kHalfMaskedAt) is at most -32768 + 8192 plus
// rounding, the last kept key's (mask ≥ kHalfKeptFloor) at least
// -8192 - 8192 less rounding: more than 8000 apart, far past 87.34.
constexpr float kHalfMaskedAt = -32768.0f;
constexpr float kHalfKeptFloor = -8192.0f;
constexpr double kHalfScoreBound = 8192;
// Rows of one head taken together: the keys computed are the most any of
// them keeps (the staircase of a causal mask rounded to this many rows).
constexpr int64_t kSkipRows = 32;
// Elements a thread takes at least in the chain after whole scores.
constexpr int64_t kWholeGrain = int64_t{1} << 14;

// The mask as rows over the scores [b,h,S,T]: rank 1 to 4, each dim 1 or
// the scores', the keys dim the scores' own.
struct MaskRows {
  const float* data = nullptr;     // a float32 mask (the only kind rows may skip keys by)
  const uint16_t* half = nullptr;  // a float16 mask (a float16 export's)
  int64_t sb = 0, sh = 0, ss = 0;  // element strides of batch, head, query row (0: broadcast)

  // Whether a float32 mask of this shape is rows over the scores: it
  // broadcasts into them without widening them, keys not broadcast. A mask
  // of rank 5 or more, even of leading 1s, would widen the sum's rank (and
  // move the axis a Softmax of axis 3 normalises): not rows.
  // `keys`: the mask's keys the node uses (its last dim, or fewer with
  // mask_to_keys); a row's elements still lie ms.back() apart.
  static bool fits(const Shape& ms, int64_t keys, const int64_t* scores) {
    const size_t rank = ms.size();
    if (rank == 0 || rank > 4) return false;
    for (size_t i = 0; i < rank; ++i) {
      const int64_t m = i == 0 ? keys : ms[rank - 1 - i], y = scores[4 - 1 - i];
      if (m != y && (i == 0 || m != 1)) return false;
    }
    return true;
  }
  static MaskRows of(const Tensor& mask, int64_t keys, const Shape& scores) {
    MaskRows r;
    const Shape& ms = mask.shape();
    if ((mask.dtype() != DType::F32 && mask.dtype() != DType::F16) || !fits(ms, keys, scores.data())) return r;
    const size_t rank = ms.size();
    int64_t dims[4] = {1, 1, 1, 1};
    for (size_t i = 0; i < rank; ++i) dims[4 - 1 - i] = ms[rank - 1 - i];
    r.ss = dims[2] == 1 ? 0 : dims[3];
    r.sh = dims[1] == 1 ? 0 : dims[2] * dims[3];
    r.sb = dims[0] == 1 ? 0 : dims[1] * dims[2] * dims[3];
    if (mask.dtype() == DType::F32) r.data = mask.data<float>();
    else r.half = mask.data<uint16_t>();
    return r;
  }
  int64_t at(int64_t bi, int64_t hi, int64_t i) const { return bi * sb + hi * sh + i * ss; }
  const float* row(int64_t bi, int64_t hi, int64_t i) const { return data + at(bi, hi, i); }
  const uint16_t* half_row(int64_t bi, int64_t hi, int64_t i) const { return half + at(bi, hi, i); }
  // Keys a row keeps: one past its last unmasked key (mask above kMaskedAt,
  // float16: kHalfMaskedAt), or t (computed whole) when it has none or the
  // last one's mask value is below kKeptFloor (kHalfKeptFloor).
  int64_t keep(int64_t bi, int64_t hi, int64_t i, int64_t t) const {
    if (half) return keep_row(half_row(bi, hi, i), t, kHalfMaskedAt, kHalfKeptFloor);
    return keep_row(row(bi, hi, i), t, kMaskedAt, kKeptFloor);
  }

 private:
  static __m256 load8(const float* m) { return _mm256_loadu_ps(m); }
  static __m256 load8(const uint16_t* m) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m)));
  }
  static float value(const float* m) { return *m; }
  static float value(const uint16_t* m) { return half_to_float(*m); }
  template <class M>
  static int64_t keep_row(const M* m, int64_t t, float masked_at, float kept_floor) {
    int64_t e = t;
    // Eight at a time from the end first (a prompt's causal rows end in
    // long masked runs; the ordered compare keeps a NaN), then one by one.
    const __m256 masked = _mm256_set1_ps(masked_at);
    while (e >= 8 && _mm256_movemask_ps(_mm256_cmp_ps(load8(m + e - 8), masked, _CMP_LE_OQ)) == 0xff) e -= 8;
    while (e > 0 && value(m + e - 1) <= masked_at) --e;
    return e == 0 || value(m + e - 1) < kept_floor ? t : e;
  }
};

// Σ v[i]² in double over four running sums: the norms below are bounds,
// not results, so any order serves, and four chains run four times faster
// than one (a prompt's rows and keys made a third of this node's own time).
double sum_squares(const float* v, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += double(v[i + j]) * double(v[i + j]);
  for (; i < n; ++i) s[0] += double(v[i]) * double(v[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The largest Euclidean norm of the t keys as the kernels read them:
// float32, float16, or int8 scale · code.
double max_norm(KvRows r, int64_t t, int64_t d, const KvConfig& kv) {
  double best = 0;
  std::vector<float> wide(static_cast<size_t>(d));
  for (int64_t j = 0; j < t; ++j) {
    const float* v = nullptr;
    if (r.dtype == DType::F32) {
      v = static_cast<const float*>(r.data) + j * d;
    } else if (r.dtype == DType::F16) {
      kv.widen(static_cast<size_t>(d), static_cast<const uint16_t*>(r.data) + j * d, wide.data());
      v = wide.data();
    } else {
      const auto* codes = static_cast<const int8_t*>(r.data) + j * d;
      for (int64_t i = 0; i < d; ++i) wide[static_cast<size_t>(i)] = q8_value(r.scales[j], codes[i]);
      v = wide.data();
    }
    const double sum = sum_squares(v, d);
    if (!(sum <= best * best)) best = std::sqrt(sum);  // NaN lands here and stays
    if (std::isnan(best)) return best;
  }
  return best;
}

class GqaMatMulKernel : public Kernel {
  struct Checked;  // what check() found (below)

 public:
  explicit GqaMatMulKernel(const KernelInfo& info)
      : trans_b_(info.attrs().get_int("transB", 0) != 0), allowzero_(info.attrs().get_int("allowzero", 0) != 0),
        state_(info.has_input(4)), masked_(trans_b_ && info.has_input(5)),
        softmax_(masked_ && info.attrs().get_int("softmax", 0) != 0),
        nan_to_zero_(softmax_ && info.attrs().get_int("nan_to_zero", 0) != 0),
        kv_repeat_(info.attrs().get_int("kv_repeat", 0)),
        any_mask_(softmax_ && info.attrs().get_int("mask_any_shape", 0) != 0),
        mask_to_keys_(info.attrs().get_int("mask_to_keys", 0) != 0),
        mask_axis_(info.attrs().get_int("mask_keys_axis", -1)), mix_(info.has_input(6)),
        score_scale_(info.attrs().get_float("score_scale", 0.0f)), config_(&sgemm_config()),
        kv_config_(kv_gemm_config()) {
    if (mix_ && (!softmax_ || !state_ || !info.has_input(7)))
      fail("has values (input 6), expected them only on the fused chain over the KV state (softmax = 1, inputs 4, 5 "
           "and 7)");
    if (kv_repeat_ < 0) fail("attribute kv_repeat is {}, expected 1 or more (0: none)", kv_repeat_);
    if (mask_to_keys_ && !softmax_)
      fail("has attribute mask_to_keys = 1 without softmax = 1 and a mask (input 5): it cuts the fused chain's mask");
    if (kv_repeat_ > 0 && (info.has_input(2) || info.has_input(3)))
      fail("has attribute kv_repeat = {} and the repeat's shapes as inputs 2 and 3, expected one or the other",
           kv_repeat_);
  }

  void reshape(ReshapeContext& ctx) override {
    if (state_) check_head_stride(ctx, 4);
    const Tensor* expand = ctx.has_input(2) ? &ctx.value(2) : nullptr;
    const Tensor* target = ctx.has_input(3) ? &ctx.value(3) : nullptr;
    const Checked c = check(ctx.dtype(0), ctx.dtype(1), ctx.shape(0), ctx.shape(1), expand, target,
                            softmax_ ? ctx.dtype(5) : DType::Undefined, softmax_ ? &ctx.shape(5) : nullptr);
    mask_rows_ = c.rows;
    const Shape scores(c.y, c.y + 4);
    if (mix_) {
      check_head_stride(ctx, 7);
      const int64_t dv = check_values(ctx.dtype(0), ctx.dtype(1), ctx.shape(1), ctx.dtype(6), ctx.shape(6));
      if (expand) check_values_repeat(ctx.shape(6), *expand, *target, c.rep);
      if (!c.rows) check_whole_p(scores, ctx.shape(5), c);
      ctx.set_output(0, ctx.dtype(0), {c.y[0], c.y[1], c.y[2], dv});
      ctx.set_workspace(mix_workspace(c, dv, ctx.dtype(6), ctx.dtype(0) == DType::F16));
      return;
    }
    ctx.set_output(0, ctx.dtype(0), c.rows ? scores : broadcast_shapes({scores, mask_shape(ctx.shape(5), c)}));
    ctx.set_workspace(workspace(ctx.dtype(0), ctx.dtype(1), ctx.shape(0), c));
  }

  // A plan may grow this node without reshaping it: run() checks what
  // reshape() does (check() below) on the tensors it is bound to. With
  // mask_any_shape only while the last reshape found the mask rows over the
  // scores: a mask that is not gives an output (and a workspace) of the
  // broadcast shape, which need not follow growth. (Should a grown mask
  // stop being rows, run() refuses the output or the workspace it was bound
  // to, by name.)
  bool follows_growth() const override { return !any_mask_ || mask_rows_; }

  void run(RunContext& ctx) override {
    const Tensor& A = ctx.input(0);
    const Tensor& KV = ctx.input(1);
    Tensor& Y = ctx.output(0);
    // What reshape checked, again (Kernel::follows_growth).
    if (state_) check_head_stride(4, ctx.input(4).dtype(), ctx.input(4).shape());
    const Checked c = check(A.dtype(), KV.dtype(), A.shape(), KV.shape(), ctx.has_input(2) ? &ctx.input(2) : nullptr,
                            ctx.has_input(3) ? &ctx.input(3) : nullptr,
                            softmax_ ? ctx.input(5).dtype() : DType::Undefined,
                            softmax_ ? &ctx.input(5).shape() : nullptr);
    if (mix_) return run_mix(ctx, c);
    if (!c.rows) {
      const Shape want = broadcast_shapes({Shape(c.y, c.y + 4), mask_shape(ctx.input(5).shape(), c)});
      if (Y.dtype() != A.dtype() || Y.shape() != want)
        fail("bound to an output of {} {}, expected {} {}", dtype_name(Y.dtype()), shape_str(Y.shape()),
             dtype_name(A.dtype()), shape_str(want));
    } else if (Y.dtype() != A.dtype() || Y.rank() != 4 || !std::equal(c.y, c.y + 4, Y.shape().begin())) {
      fail("bound to an output of {} {}, expected {} [{},{},{},{}]", dtype_name(Y.dtype()), shape_str(Y.shape()),
           dtype_name(A.dtype()), c.y[0], c.y[1], c.y[2], c.y[3]);
    }
    const size_t need = workspace(A.dtype(), KV.dtype(), A.shape(), c);
    if (need > ctx.workspace_bytes())
      fail("needs a {}-byte workspace for A {} and KV {}, the plan has {}", need, shape_str(A.shape()),
           shape_str(KV.shape()), ctx.workspace_bytes());
    const int64_t b = KV.dim(0), kvh = KV.dim(1), t = KV.dim(2), d = KV.dim(3);
    const int64_t head_stride = state_ ? *ctx.input(4).data<int64_t>() : t * d;
    kv_state_head(KV.raw(), KV.dtype(), head_stride, 0, t, d);  // the stride checked before any task runs
    const int64_t h = A.dim(1), s = A.dim(2), rep = h / kvh;
    if (Y.size() == 0) return;
    const bool half = half_path(A.dtype(), KV.dtype());
    if (A.dtype() != DType::F32 && !half) return run_reference(A, KV, Y, rep);
    const size_t m = static_cast<size_t>(rep * s), x = static_cast<size_t>(A.dim(3));
    const size_t n = static_cast<size_t>(trans_b_ ? t : d), k = x;
    const size_t slot = slot_bytes(m, static_cast<size_t>(t), static_cast<size_t>(d), KV.dtype());
    auto* ws = static_cast<unsigned char*>(ctx.workspace());
    const size_t slots = slot * static_cast<size_t>(ThreadPool::default_threads());
    // float16 A: A and the product as float32 after the slots.
    float* a_wide = nullptr;
    float* y_wide = nullptr;
    if (half) {
      unsigned char* at = ws + slots;
      a_wide = reinterpret_cast<float*>(at);
      y_wide = reinterpret_cast<float*>(at + align64(static_cast<size_t>(A.size()) * 4));
      vec_math_config().widen(static_cast<size_t>(A.size()), A.data<uint16_t>(), a_wide);
    }
    const float* a = half ? a_wide : A.data<float>();
    // A mask that is not rows over the scores (mask_any_shape): the scores
    // whole after the slots (float16: as its widened product, y_wide), then
    // the chain over them.
    float* whole = c.rows || half ? nullptr : reinterpret_cast<float*>(ws + slots);
    float* y = half ? y_wide : whole ? whole : Y.data<float>();
    const MaskRows mask =
        masked_ && c.rows ? MaskRows::of(ctx.input(5), cut_keys(ctx.input(5).shape(), c.t), Y.shape()) : MaskRows{};
    const int64_t mask_heads = find_keeps(mask, b, h, s, t);
    const std::vector<int64_t>& keeps = keeps_;
    auto one = [&](int64_t task, void* work, ThreadPool* inner) {
      const int64_t bi = task / kvh, g = task % kvh;
      const float* ab = a + (bi * h + g * rep) * s * static_cast<int64_t>(x);
      const KvRows rows = kv_state_head(KV.raw(), KV.dtype(), head_stride, bi * kvh + g, t, d);
      float* yb = y + (bi * h + g * rep) * s * static_cast<int64_t>(n);
      if (!trans_b_) return kv_mix(kv_config_, m, k, n, ab, x, rows, yb, n, work, inner);
      // Row r of this task (head g·rep + r / s, position r % s) keeps kept(r) keys.
      auto kept = [&](int64_t r) {
        return keeps[static_cast<size_t>((bi * mask_heads + (mask_heads > 1 ? g * rep + r / s : 0)) * s + r % s)];
      };
      if (softmax_ && half && c.rows) {
        // A float16 export's chain, each of its nodes rounding to float16:
        // the product (its GqaMatMul's output), ·scale and + mask (the
        // float16 Mul and Add compute in float and round once), then the
        // Softmax row on the widened values; its output is rounded by the
        // narrow below, as the float16 Softmax rounds it. Keys are left out
        // as for float32, under the float16 bounds (kHalfMaskedAt).
        auto mask_row = [&](int64_t r) { return mask.half_row(bi, g * rep + r / s, r % s); };
        const bool skip = !keeps.empty() && may_skip(kept, rep, s, t, d, ab, rows, true);
        return scores_in_blocks(kept, skip, rep, s, t, d, ab, rows, yb, inner, [&](int64_t r0, int64_t r1, int64_t e) {
          chain(yb + r0 * t, r0, r1, e, t, skip, kept, mask_row);
        });
      }
      if (softmax_ && c.rows) {
        // Row r of this task is head g·rep + r / s, position r % s.
        auto mask_row = [&](int64_t r) { return mask.row(bi, g * rep + r / s, r % s); };
        const bool skip = may_skip(kept, rep, s, t, d, ab, rows, false);
        return scores_in_blocks(kept, skip, rep, s, t, d, ab, rows, yb, inner, [&](int64_t r0, int64_t r1, int64_t e) {
          chain(yb + r0 * t, r0, r1, e, t, skip, kept, mask_row);
        });
      }
      if (keeps.empty() || !may_skip(kept, rep, s, t, d, ab, rows, false))
        return kv_scores(kv_config_, m, n, k, ab, x, rows, yb, n, inner);
      scores_in_blocks(kept, true, rep, s, t, d, ab, rows, yb, inner, [](int64_t, int64_t, int64_t) {});
    };
    const int64_t tasks = b * kvh;
    ThreadPool& pool = ctx.pool();
    run_task_ranges(pool, tasks, [&](int64_t task, int64_t r, ThreadPool* inner) {
      one(task, ws && slot ? ws + static_cast<size_t>(r) * slot : nullptr, inner);
    });
    if (half && softmax_ && !c.rows) {
      // The float16 chain on the whole product, into a float32 copy of Y
      // (a fallback: allocated here), rounded into Y.
      wide_out_.resize(static_cast<size_t>(Y.size()));
      whole_chain(y_wide, Shape(c.y, c.y + 4), cut_mask(ctx.input(5), c), wide_out_.data(), Y.shape(), true, pool);
      vec_math_config().narrow(static_cast<size_t>(Y.size()), wide_out_.data(), Y.data<uint16_t>());
      return;
    }
    if (half) vec_math_config().narrow(static_cast<size_t>(Y.size()), y_wide, Y.data<uint16_t>());
    if (whole) whole_chain(whole, Shape(c.y, c.y + 4), cut_mask(ctx.input(5), c), Y.data<float>(), Y.shape(), false,
                           pool);
  }

  // y (out_shape, float32) = Softmax over the last axis of scores ·
  // score_scale + mask, the mask broadcast as Add broadcasts it, each
  // operation rounded as the Mul, Add and Softmax nodes round it; NaNs to +0
  // with nan_to_zero. half (a float16 export's chain, mask float16): each
  // node's float16 rounding, y = h(h(h(s)·scale) + m), and the Softmax's
  // output rounded to float16 too (the values y then holds are P's). y may
  // be scores when out_shape is the scores' shape.
  void whole_chain(const float* scores, const Shape& scores_shape, const Tensor& mask, float* y,
                   const Shape& out_shape, bool half, ThreadPool& pool) const {
    const BroadcastPlan plan({scores_shape, mask.shape()}, out_shape);
    const int64_t inner = plan.inner();
    const bool step_s = plan.inner_step(0), step_m = plan.inner_step(1);
    const float sc = score_scale_;
    auto h = [](float v) { return half_to_float(float_to_half(v)); };
    pool.parallel_for(plan.outer(), std::max<int64_t>(1, kWholeGrain / std::max<int64_t>(inner, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t o = begin; o < end; ++o) {
                          const float* ps = scores + plan.offset(0, o);
                          float* py = y + o * inner;
                          if (half) {
                            const uint16_t* pm = mask.data<uint16_t>() + plan.offset(1, o);
                            for (int64_t k = 0; k < inner; ++k)
                              py[k] = h(h(h(ps[step_s ? k : 0]) * sc) + half_to_float(pm[step_m ? k : 0]));
                            continue;
                          }
                          const float* pm = mask.data<float>() + plan.offset(1, o);
                          for (int64_t k = 0; k < inner; ++k) {
                            const float scaled = ps[step_s ? k : 0] * sc;
                            py[k] = scaled + pm[step_m ? k : 0];
                          }
                        }
                      });
    const int64_t n = out_shape.back(), rows = numel(out_shape) / std::max<int64_t>(n, 1);
    pool.parallel_for(rows, std::max<int64_t>(1, kWholeGrain / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        softmax_row(y + r * n, y + r * n, n);
        if (nan_to_zero_) zero_nans(y + r * n, n);
        if (half)
          for (int64_t j = 0; j < n; ++j) y[r * n + j] = h(y[r * n + j]);
      }
    });
  }

  static void zero_nans(float* row, int64_t n) {
    for (int64_t j = 0; j < n; ++j)
      if (std::isnan(row[j])) row[j] = 0.0f;
  }

  // Whether rows may leave keys out: some row leaves one out, and the
  // scores bound holds (kMaskedAt above) for these s rows of q against the
  // t keys.
  template <class Kept>
  bool may_skip(const Kept& kept, int64_t rep, int64_t s, int64_t t, int64_t d, const float* q, KvRows keys,
                bool half) const {
    int64_t left_out = 0;
    for (int64_t r = 0; r < rep * s; ++r) left_out += t - kept(r);
    if (left_out == 0) return false;
    double qmax = 0;
    for (int64_t r = 0; r < rep * s; ++r) {
      const double sum = sum_squares(q + r * d, d);
      qmax = std::max(qmax, std::sqrt(sum));
      if (std::isnan(sum)) return false;
    }
    const double product = qmax * max_norm(keys, t, d, *kv_config_.kv) * 1.001;
    const double bound = product * std::abs(double(score_scale_));
    return half ? product < kHalfScoreBound && bound < kHalfScoreBound : bound < kScoreBound;
  }

  // Q·Kᵀ for rep heads of s rows of q (rep·s rows of d) in blocks of
  // kSkipRows rows. With `skip`, row r keeps kept(r) keys (MaskRows::keep):
  // each block (within one head) is computed up to the most keys one of its
  // rows keeps, the rest of its rows 0; without, every block whole, blocks
  // running across heads (a decode step's rep rows are one block that reads
  // the keys once). then(r0, r1, e) runs on each block's rows [r0, r1),
  // whose scores from key e on are 0, right after them, while they are in
  // cache (split over `inner`'s threads when there is one).
  template <class Kept, class Then>
  void scores_in_blocks(const Kept& kept, bool skip, int64_t rep, int64_t s, int64_t t, int64_t d, const float* q,
                        KvRows keys, float* y, ThreadPool* inner, const Then& then) const {
    const int64_t span = skip ? s : rep * s;  // blocks that skip stay within a head (its staircase)
    for (int64_t h0 = 0; h0 < rep * s; h0 += span)
      for (int64_t i0 = 0; i0 < span; i0 += kSkipRows) {
        const int64_t r0 = h0 + i0, rows = std::min(kSkipRows, span - i0);
        const int64_t e = block_keys(kept, skip, r0, rows, t);
        if (e > 0)
          kv_scores(kv_config_, static_cast<size_t>(rows), static_cast<size_t>(e), static_cast<size_t>(d), q + r0 * d,
                    static_cast<size_t>(d), keys, y + r0 * t, static_cast<size_t>(t), inner);
        for (int64_t r = r0; r < r0 + rows; ++r) std::fill(y + r * t + e, y + (r + 1) * t, 0.0f);
        if (inner) inner->parallel_for(rows, 1, [&](int64_t b0, int64_t b1) { then(r0 + b0, r0 + b1, e); });
        else then(r0, r0 + rows, e);
      }
  }

  // The keys a block of rows [r0, r0 + rows) computes: the most one of its
  // rows keeps, or all t without skip.
  template <class Kept>
  static int64_t block_keys(const Kept& kept, bool skip, int64_t r0, int64_t rows, int64_t t) {
    int64_t e = skip ? 0 : t;
    for (int64_t r = r0; skip && r < r0 + rows; ++r) e = std::max(e, kept(r));
    return e;
  }

  // The fused chain on rows [r0, r1) of a task, row r0's scores at y and
  // the rest t apart; their scores from key e on are 0.
  template <class Kept, class MaskRow>
  void chain(float* y, int64_t r0, int64_t r1, int64_t e, int64_t t, bool skip, const Kept& kept,
             const MaskRow& mask_row) const {
    for (int64_t r = r0; r < r1; ++r) {
      // Mul, then Add, each rounded (no contraction: -ffp-contract=off).
      // With skip, the keys from kept(r) on end more than 104 below
      // the row's maximum (kMaskedAt above): the chain runs on the
      // prefix Softmax needs and the rest is 0, as the whole row's
      // Softmax writes it ([e, t) is 0 already).
      float* yr = y + (r - r0) * t;
      const int64_t n = skip ? softmax_prefix(kept(r), t) : t;
      scale_add(yr, n, mask_row(r));
      softmax_row(yr, yr, n);
      if (nan_to_zero_) zero_nans(yr, n);
      if (n < e) std::fill(yr + n, yr + e, 0.0f);
    }
  }

  // The chain's ·scale, + mask on a row's first n scores: float32, each
  // operation rounded once (-ffp-contract=off: no FMA); float16, each
  // rounded to float16 as the export's nodes round them.
  void scale_add(float* y, int64_t n, const float* m) const {
    const float sc = score_scale_;
    for (int64_t j = 0; j < n; ++j) y[j] = y[j] * sc + m[j];
  }
  void scale_add(float* y, int64_t n, const uint16_t* m) const {
    vec_math_config().f16_scale_add(static_cast<size_t>(n), y, score_scale_, m);
  }

  // Keys each row keeps (keeps_), found once for every task: per head only
  // when the mask has heads of its own. Returns those heads (1 or h). A
  // float16 mask's rows only for the fused chain (softmax = 1), whose
  // float16 bounds they are.
  int64_t find_keeps(const MaskRows& mask, int64_t b, int64_t h, int64_t s, int64_t t) {
    const int64_t mask_heads = mask.sh ? h : 1;
    const bool rows = mask.data || (mask.half && softmax_);
    keeps_.resize(rows ? static_cast<size_t>(b * mask_heads * s) : 0);  // kept across runs: no allocation a step
    for (size_t i = 0; i < keeps_.size(); ++i) {
      const int64_t row = static_cast<int64_t>(i);
      keeps_[i] = mask.keep(row / (mask_heads * s), row / s % mask_heads, row % s, t);
    }
    return mask_heads;
  }

  // The fused attention (inputs 6 and 7): per task (a batch's KV head) each
  // block of rows gets its scores and chain in the thread's slot, then its
  // P·V into Y. P·V runs kv_mix on the block's rows, each up to k keys: the
  // block's most kept e, or past the last value row holding a non-finite
  // value (0·inf is NaN) — the keys kv_mix would multiply the row by in the
  // P·V node (ops/kv_gemm.cpp), the same FMA chain for any row count.
  void run_mix(RunContext& ctx, const Checked& c) {
    const Tensor& A = ctx.input(0);
    const Tensor& K = ctx.input(1);
    const Tensor& V = ctx.input(6);
    Tensor& Y = ctx.output(0);
    check_head_stride(7, ctx.input(7).dtype(), ctx.input(7).shape());
    const int64_t dv = check_values(A.dtype(), K.dtype(), K.shape(), V.dtype(), V.shape());
    if (ctx.has_input(2)) check_values_repeat(V.shape(), ctx.input(2), ctx.input(3), c.rep);
    if (!c.rows) check_whole_p(Shape(c.y, c.y + 4), ctx.input(5).shape(), c);
    const int64_t want[4] = {c.y[0], c.y[1], c.y[2], dv};
    if (Y.dtype() != A.dtype() || Y.rank() != 4 || !std::equal(want, want + 4, Y.shape().begin()))
      fail("bound to an output of {} {}, expected {} [{},{},{},{}]", dtype_name(Y.dtype()), shape_str(Y.shape()),
           dtype_name(A.dtype()), want[0], want[1], want[2], want[3]);
    const bool half = A.dtype() == DType::F16;
    const size_t need = mix_workspace(c, dv, V.dtype(), half);
    if (need > ctx.workspace_bytes())
      fail("needs a {}-byte workspace for A {}, K {} and V {}, the plan has {}", need, shape_str(A.shape()),
           shape_str(K.shape()), shape_str(V.shape()), ctx.workspace_bytes());
    const int64_t b = K.dim(0), kvh = K.dim(1), t = c.t, d = c.d, h = A.dim(1), s = A.dim(2), rep = c.rep;
    const int64_t k_stride = *ctx.input(4).data<int64_t>(), v_stride = *ctx.input(7).data<int64_t>();
    kv_state_head(K.raw(), K.dtype(), k_stride, 0, t, d);  // the strides checked before any task runs
    kv_state_head(V.raw(), V.dtype(), v_stride, 0, t, dv);
    if (Y.size() == 0) return;
    if (!c.rows) return run_mix_whole(ctx, c, dv, k_stride, v_stride);
    const MaskRows mask = MaskRows::of(ctx.input(5), cut_keys(ctx.input(5).shape(), t), Shape(c.y, c.y + 4));
    const int64_t mask_heads = find_keeps(mask, b, h, s, t);
    const int64_t tasks = b * kvh;
    ThreadPool& pool = ctx.pool();
    const int64_t lanes = std::min<int64_t>(pool.size(), ThreadPool::default_threads());
    const size_t slot = mix_slot(static_cast<size_t>(t), static_cast<size_t>(dv), V.dtype(), half);
    auto* ws = static_cast<unsigned char*>(ctx.workspace());
    // A float16 export's Q widened, and the output computed in float32 and
    // rounded to float16 at the end, as the two nodes widen and round theirs.
    const float* q = A.data<float>();
    float* y = Y.data<float>();
    if (half) {
      auto* wide = ws + slot * static_cast<size_t>(ThreadPool::default_threads());
      vec_math_config().widen(static_cast<size_t>(A.size()), A.data<uint16_t>(), reinterpret_cast<float*>(wide));
      q = reinterpret_cast<const float*>(wide);
      y = reinterpret_cast<float*>(wide + align64(static_cast<size_t>(A.size()) * sizeof(float)));
    }
    // One KV head of one batch: its rows of q and of the output, its keys
    // and values, and which keys row r keeps and its mask row.
    struct Head {
      int64_t bi, g;
      const float* q;
      KvRows keys, values;
      float* y;
    };
    auto head = [&](int64_t task) {
      const int64_t bi = task / kvh, g = task % kvh;
      return Head{bi, g, q + (bi * h + g * rep) * s * d,
                  kv_state_head(K.raw(), K.dtype(), k_stride, bi * kvh + g, t, d),
                  kv_state_head(V.raw(), V.dtype(), v_stride, bi * kvh + g, t, dv), y + (bi * h + g * rep) * s * dv};
    };
    auto kept = [&](const Head& hd, int64_t r) {
      return keeps_[static_cast<size_t>((hd.bi * mask_heads + (mask_heads > 1 ? hd.g * rep + r / s : 0)) * s + r % s)];
    };
    // Per head: may its rows leave keys out (may_skip), past which value
    // row they are multiplied even so (0·inf is NaN), and its blocks of
    // rows, as scores_in_blocks cuts them (within a head when skipping).
    mix_heads_.resize(static_cast<size_t>(tasks));
    auto plan_head = [&](int64_t task) {
      const Head hd = head(task);
      MixHead& mh = mix_heads_[static_cast<size_t>(task)];
      mh.skip = !keeps_.empty() && may_skip([&](int64_t r) { return kept(hd, r); }, rep, s, t, d, hd.q, hd.keys, half);
      mh.finite_from = mh.skip ? static_cast<int64_t>(kv_finite_end(hd.values, static_cast<size_t>(t),
                                                                        static_cast<size_t>(dv), 0))
                                : t;
      mh.span = mh.skip ? s : rep * s;
      mh.per_span = (mh.span + kSkipRows - 1) / kSkipRows;
    };
    // A prompt's heads over the pool (their norms and scans read every row);
    // a decode step's on this thread (nothing to leave out: no wake-up).
    if (rep * s > kSkipRows) pool.run(tasks, plan_head);
    else for (int64_t task = 0; task < tasks; ++task) plan_head(task);
    mix_first_.assign(1, 0);
    for (const MixHead& mh : mix_heads_) mix_first_.push_back(mix_first_.back() + rep * s / mh.span * mh.per_span);
    const int64_t units = mix_first_.back();
    // Block u (of every head's blocks in order): its scores, chain and P·V
    // in the slot at `work`.
    auto block = [&](int64_t u, unsigned char* work, ThreadPool* inner) {
      const int64_t task = std::upper_bound(mix_first_.begin(), mix_first_.end(), u) - mix_first_.begin() - 1;
      const MixHead& mh = mix_heads_[static_cast<size_t>(task)];
      const Head hd = head(task);
      const int64_t j = u - mix_first_[static_cast<size_t>(task)], i0 = j % mh.per_span * kSkipRows;
      const int64_t r0 = j / mh.per_span * mh.span + i0, rows = std::min(kSkipRows, mh.span - i0);
      auto kept_r = [&](int64_t r) { return kept(hd, r); };
      const int64_t e = block_keys(kept_r, mh.skip, r0, rows, t);
      auto* p = reinterpret_cast<float*>(work);
      if (e > 0)
        kv_scores(kv_config_, static_cast<size_t>(rows), static_cast<size_t>(e), static_cast<size_t>(d),
                  hd.q + r0 * d, static_cast<size_t>(d), hd.keys, p, static_cast<size_t>(t), inner);
      size_t at = align64(static_cast<size_t>(kSkipRows * t) * sizeof(float));
      if (half) {
        chain(p, r0, r0 + rows, e, t, mh.skip, kept_r,
              [&](int64_t r) { return mask.half_row(hd.bi, hd.g * rep + r / s, r % s); });
        // P rounded to float16 as the scores node's output is (through a
        // float16 row in the slot), widened as the P·V node widens it.
        auto* narrow = reinterpret_cast<uint16_t*>(work + at);
        for (int64_t r = 0; r < rows; ++r) {
          vec_math_config().narrow(static_cast<size_t>(e), p + r * t, narrow);
          vec_math_config().widen(static_cast<size_t>(e), narrow, p + r * t);
        }
        at += align64(static_cast<size_t>(t) * sizeof(uint16_t));
      } else {
        chain(p, r0, r0 + rows, e, t, mh.skip, kept_r,
              [&](int64_t r) { return mask.row(hd.bi, hd.g * rep + r / s, r % s); });
      }
      const int64_t k = e < t ? std::max(e, mh.finite_from) : t;
      for (int64_t r = 0; r < rows; ++r) std::fill(p + r * t + e, p + r * t + k, 0.0f);
      kv_mix(kv_config_, static_cast<size_t>(rows), static_cast<size_t>(k), static_cast<size_t>(dv), p,
             static_cast<size_t>(t), hd.values, hd.y + r0 * dv, static_cast<size_t>(dv), work + at, inner);
    };
    // Blocks taken dynamically by one lane (a slot) per thread, so heads
    // fewer than or not a multiple of the threads keep them all busy; one
    // block alone (a decode step's one head) splits its work over the pool.
    if (std::min(lanes, units) < 2) {
      for (int64_t u = 0; u < units; ++u) block(u, ws, &pool);
    } else {
      std::atomic<int64_t> next{0};
      pool.run(std::min(lanes, units), [&](int64_t lane) {
        for (int64_t u = next.fetch_add(1); u < units; u = next.fetch_add(1))
          block(u, ws + static_cast<size_t>(lane) * slot, nullptr);
      });
    }
    if (half) vec_math_config().narrow(static_cast<size_t>(Y.size()), y, Y.data<uint16_t>());
  }

  // A mask of undeclared shape (mask_any_shape) that turns out not to be
  // rows over the scores: the scores whole, the chain as its nodes compute
  // it (whole_chain) in place over them, then each task's P·V over all its
  // rows, as the two nodes run it. check_whole_p has checked that P keeps
  // the scores' shape (the P·V node would refuse another).
  void run_mix_whole(RunContext& ctx, const Checked& c, int64_t dv, int64_t k_stride, int64_t v_stride) {
    const Tensor& A = ctx.input(0);
    const Tensor& K = ctx.input(1);
    const Tensor& V = ctx.input(6);
    const int64_t b = K.dim(0), kvh = K.dim(1), t = c.t, d = c.d, h = A.dim(1), s = A.dim(2), rep = c.rep;
    const size_t m = static_cast<size_t>(rep * s);
    const size_t slot = kv_mix_workspace(kv_config_, m, static_cast<size_t>(t), static_cast<size_t>(dv), V.dtype());
    auto* ws = static_cast<unsigned char*>(ctx.workspace());
    auto* p = reinterpret_cast<float*>(ws + slot * static_cast<size_t>(ThreadPool::default_threads()));
    const Shape scores(c.y, c.y + 4);
    ThreadPool& pool = ctx.pool();
    // A float16 export's Q and output widened (a fallback: allocated here).
    const bool half = A.dtype() == DType::F16;
    const float* q = A.data<float>();
    float* out = ctx.output(0).data<float>();
    if (half) {
      wide_in_.resize(static_cast<size_t>(A.size()));
      wide_out_.resize(static_cast<size_t>(ctx.output(0).size()));
      vec_math_config().widen(wide_in_.size(), A.data<uint16_t>(), wide_in_.data());
      q = wide_in_.data();
      out = wide_out_.data();
    }
    run_task_ranges(pool, b * kvh, [&](int64_t task, int64_t, ThreadPool* inner) {
      const int64_t bi = task / kvh, g = task % kvh;
      kv_scores(kv_config_, m, static_cast<size_t>(t), static_cast<size_t>(d), q + (bi * h + g * rep) * s * d,
                static_cast<size_t>(d), kv_state_head(K.raw(), K.dtype(), k_stride, bi * kvh + g, t, d),
                p + (bi * h + g * rep) * s * t, static_cast<size_t>(t), inner);
    });
    whole_chain(p, scores, cut_mask(ctx.input(5), c), p, scores, half, pool);
    run_task_ranges(pool, b * kvh, [&](int64_t task, int64_t r, ThreadPool* inner) {
      const int64_t bi = task / kvh, g = task % kvh;
      kv_mix(kv_config_, m, static_cast<size_t>(t), static_cast<size_t>(dv), p + (bi * h + g * rep) * s * t,
             static_cast<size_t>(t), kv_state_head(V.raw(), V.dtype(), v_stride, bi * kvh + g, t, dv),
             out + (bi * h + g * rep) * s * dv, static_cast<size_t>(dv), ws + static_cast<size_t>(r) * slot, inner);
    });
    if (half) vec_math_config().narrow(wide_out_.size(), wide_out_.data(), ctx.output(0).data<uint16_t>());
  }

  // The P of a mask that is not rows over the scores keeps their shape, or
  // no P·V of it exists (the P·V node refuses it as well).
  void check_whole_p(const Shape& scores, const Shape& mask, const Checked& c) const {
    const Shape p = broadcast_shapes({scores, mask_shape(mask, c)});
    if (p != scores)
      fail("mask {} widens the scores {} to {}: P·V needs P of the scores' shape", shape_str(mask), shape_str(scores),
           shape_str(p));
  }

  // Y[b, n, i, j] = Σx A[b, n, i, x] · KV[b, n / rep, ·], in float (the non-float32 path).
  void run_reference(const Tensor& A, const Tensor& KV, Tensor& Y, int64_t rep) const {
    const int64_t b = A.dim(0), h = A.dim(1), s = A.dim(2), x = A.dim(3), t = KV.dim(2), d = KV.dim(3);
    const int64_t n = trans_b_ ? t : d, kvh = KV.dim(1);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi) {
        const int64_t g = hi / rep;
        for (int64_t i = 0; i < s; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < x; ++k) {
              const double a = tensor_double_at(A, ((bi * h + hi) * s + i) * x + k);
              const int64_t kv = trans_b_ ? ((bi * kvh + g) * t + j) * d + k : ((bi * kvh + g) * t + k) * d + j;
              acc += a * tensor_double_at(KV, kv);
            }
            const int64_t o = ((bi * h + hi) * s + i) * n + j;
            dispatch_float(Y.dtype(), "GqaMatMul output", [&](auto tag) {
              using T = typename decltype(tag)::type;
              Y.data<T>()[o] = Arith<T>::store(static_cast<typename Arith<T>::C>(acc));
            });
          }
      }
  }

  std::string describe() const override {
    // Q·Kᵀ on the KV qk kernel at every row count; P·V on the pv kernel for
    // a few rows (decode), the float GEMM for a prompt's (ops/kv_gemm.h).
    if (mix_)
      return fmt::format("GQA softmax(s.Q.K^T + mask{}).V on the KV state, a block of rows at a time {} / {}",
                         mask_to_keys_ ? "[..., :T]" : "", kv_config_.kv->qk_name, kv_config_.kv->pv_name);
    return fmt::format("GQA {}{} {}", trans_b_ ? (softmax_ ? (mask_to_keys_ ? "softmax(s.Q.K^T + mask[..., :T])"
                                                                             : "softmax(s.Q.K^T + mask)")
                                                          : "Q.K^T")
                                               : "P.V",
                       state_ ? " on the KV state" : "",
                       trans_b_ ? kv_config_.kv->qk_name
                                : fmt::format("{} / {}", kv_config_.kv->pv_name, config_->gemm_name));
  }

 private:
  // float16 A over a float16 KV, or over the KV state: the float32 kernels on widened A.
  bool half_path(DType a, DType kv) const { return a == DType::F16 && (state_ || kv == DType::F16); }

  // One task's workspace: A [m×k] against t rows of d (the scores need none).
  size_t slot_bytes(size_t m, size_t t, size_t d, DType kv) const {
    return trans_b_ ? 0 : kv_mix_workspace(kv_config_, m, t, d, kv);
  }

  // The fused attention's slot a thread: a block's P (kSkipRows rows of t),
  // for a float16 export a float16 row to round P through, and kv_mix's
  // workspace for the block (none where it reads V in place).
  size_t mix_slot(size_t t, size_t dv, DType v, bool half) const {
    return align64(static_cast<size_t>(kSkipRows) * t * sizeof(float)) +
           (half ? align64(t * sizeof(uint16_t)) : 0) +
           kv_mix_workspace(kv_config_, static_cast<size_t>(kSkipRows), t, dv, v);
  }
  // A slot a thread; for a float16 export its Q and output widened after
  // them. With a mask that is not rows (run_mix_whole): kv_mix's workspace
  // for a task's rows a thread, and the scores whole (a float16 export's Q
  // and output widened apart, in the kernel's own buffers).
  size_t mix_workspace(const Checked& c, int64_t dv, DType v, bool half) const {
    const size_t threads = static_cast<size_t>(ThreadPool::default_threads());
    if (c.rows) {
      const size_t slots = mix_slot(static_cast<size_t>(c.t), static_cast<size_t>(dv), v, half) * threads;
      if (!half) return slots;
      const int64_t q = checked_mul(checked_mul(c.y[0], c.y[1], "the queries"), checked_mul(c.y[2], c.d, "the queries"),
                                    "the queries");
      const int64_t out = checked_mul(checked_mul(c.y[0], c.y[1], "the output"), checked_mul(c.y[2], dv, "the output"),
                                      "the output");
      return slots + align64(static_cast<size_t>(q) * sizeof(float)) + align64(static_cast<size_t>(out) * sizeof(float));
    }
    int64_t y = 4;
    for (int64_t dim : c.y) y = checked_mul(y, dim, "the scores' bytes");
    return kv_mix_workspace(kv_config_, static_cast<size_t>(c.rep * c.y[2]), static_cast<size_t>(c.t),
                            static_cast<size_t>(dv), v) * threads + align64(static_cast<size_t>(y));
  }

  // The fused attention's values against its keys: the same state dtype,
  // [b, kvh, T] as the keys', float32 or float16 A. Returns their head size dv.
  static int64_t check_values(DType a, DType k, const Shape& ks, DType v, const Shape& vs) {
    if (a != DType::F32 && a != DType::F16)
      fail("A is {}: the fused attention (values as input 6) takes float32 or float16", dtype_name(a));
    if (v != k) fail("keys and values are {} and {}, expected one KV state dtype", dtype_name(k), dtype_name(v));
    if (vs.size() != 4 || vs[0] != ks[0] || vs[1] != ks[1] || vs[2] != ks[2])
      fail("values {} do not match keys {}: expected [{},{},{},dv]", shape_str(vs), shape_str(ks), ks[0], ks[1], ks[2]);
    return vs[3];
  }
  // The repeat's shapes (inputs 2 and 3, the keys' own) repeat the values
  // as many times.
  void check_values_repeat(const Shape& v, const Tensor& expand, const Tensor& target, int64_t rep) const {
    if (spelled_repeat(v, expand, target) != rep)
      fail("the repeat's shapes repeat the values {} other than the keys ({} times)", shape_str(v), rep);
  }

  struct Checked {
    int64_t rep;   // query heads per KV head
    int64_t t, d;  // KV positions and head size
    int64_t y[4];  // the scores' shape: the output's when the mask is rows over them
    bool rows = true;  // no mask, or one that is rows over the scores (MaskRows::fits)
  };

  // What reshape() checks and run() checks again (Kernel::follows_growth),
  // allocating nothing unless it fails: the dtypes, A [b,h,S,X] against KV
  // [b,kvh,T,d] repeated rep times (the repeat the graph spelled out as
  // Expand to `expand`, Reshape to `target`, when it has them), and with the
  // fused Softmax the mask (`mask`, of `mask_dtype`) over the scores' rows.
  Checked check(DType t, DType kv_dtype, const Shape& a, const Shape& kv, const Tensor* expand, const Tensor* target,
                DType mask_dtype, const Shape* mask) const {
    // float32 runs the GEMM; float16 / bfloat16 / double (a fusion that
    // could not see the dtype) run the reference loop below, in float.
    // A KV state is float32 or float16 (KernelOptions::kv_dtype) under float32 A.
    if (state_) {
      if ((t != DType::F32 && t != DType::F16) ||
          (kv_dtype != DType::F32 && kv_dtype != DType::F16 && kv_dtype != DType::I8))
        fail("inputs are {} and {}: over a KV state A is float32 or float16 and the state float32, float16 or int8",
             dtype_name(t), dtype_name(kv_dtype));
    } else if ((t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::F64) || kv_dtype != t) {
      fail("inputs are {} and {}, expected float32 (or one float type)", dtype_name(t), dtype_name(kv_dtype));
    }
    if (a.size() != 4 || kv.size() != 4)
      fail("expected A [b,h,S,X] and KV [b,kvh,T,d], got {} and {}", shape_str(a), shape_str(kv));
    Checked c{1, kv[2], kv[3], {}};  // without the repeat's shapes: one query head per KV head
    if (!expand != !target)
      fail("has only input {} of the repeat's two shapes (inputs 2 and 3), expected both or neither", expand ? 2 : 3);
    if (expand) {
      c.rep = spelled_repeat(kv, *expand, *target);
    } else if (kv_repeat_ > 0) {
      // The pass proved e and r this repeat of the cache's dims: they are
      // checked as the inputs would be (allowzero's copies included).
      const int64_t e[5] = {kv[0], kv[1], kv_repeat_, kv[2], kv[3]};
      const int64_t r[4] = {kv[0], checked_mul(kv[1], kv_repeat_, "the repeated KV heads"), kv[2], kv[3]};
      c.rep = repeat_of(kv, e, 5, r, 4);
    }
    const int64_t x = trans_b_ ? kv[3] : kv[2];
    if (a[0] != kv[0] || a[1] != checked_mul(kv[1], c.rep, "the repeated KV heads") || a[3] != x)
      fail("A {} does not match the repeated KV [{},{},{},{}]", shape_str(a), kv[0], kv[1] * c.rep, kv[2], kv[3]);
    c.y[0] = a[0], c.y[1] = a[1], c.y[2] = a[2], c.y[3] = trans_b_ ? kv[2] : kv[3];
    if (mask) {
      // The pass saw float32 (or float16) scores and mask of one dtype, the
      // mask unable to widen them (declared shapes); the file's values must agree.
      if ((t != DType::F32 && t != DType::F16) || mask_dtype != t)
        fail("scores and mask are {} and {}: the fused ·scale + mask -> Softmax takes both float32 or both float16",
             dtype_name(t), dtype_name(mask_dtype));
      const int64_t rank = static_cast<int64_t>(mask->size());
      if (mask_to_keys_ && (mask_axis_ < -rank || mask_axis_ >= rank))
        fail("mask {} has no axis {} to cut to the {} keys (attribute mask_keys_axis, the Slice's)",
             shape_str(*mask), mask_axis_, c.t);
      const int64_t keys = cut_keys(*mask, c.t);
      const bool rows = keys >= 0 && MaskRows::fits(*mask, keys, c.y);
      if (!rows && !any_mask_)
        fail("mask {}{} does not broadcast into the scores {} along their rows, as the graph declared",
             shape_str(*mask), mask_to_keys_ ? fmt::format(" (its axis {} cut to {})", mask_axis_, c.t) : "",
             shape_str(Shape(c.y, c.y + 4)));
      c.rows = rows;
    }
    return c;
  }

  // The axis mask_to_keys cuts, counted from the front (check() has
  // checked it is one of the mask's).
  size_t cut_axis(const Shape& mask) const {
    return static_cast<size_t>(mask_axis_ < 0 ? mask_axis_ + static_cast<int64_t>(mask.size()) : mask_axis_);
  }
  // The keys a row of the mask gives the scores, its rows still lying
  // mask.back() apart (MaskRows): its last dim, or that cut to t. -1 when
  // the cut leaves rows that cannot be read in place (another axis cut:
  // cut_mask copies), 0 for a rank-0 mask (never rows).
  int64_t cut_keys(const Shape& mask, int64_t t) const {
    if (mask.empty()) return 0;
    if (!mask_to_keys_) return mask.back();
    const size_t a = cut_axis(mask);
    if (a + 1 == mask.size()) return std::min(mask.back(), t);
    return mask[a] <= t ? mask.back() : -1;
  }
  // The mask's shape as the Slice leaves it (what Add would have broadcast).
  Shape mask_shape(const Shape& mask, const Checked& c) const {
    Shape cut = mask;
    if (!mask_to_keys_ || cut.empty()) return cut;
    const size_t a = cut_axis(mask);
    cut[a] = std::min(mask[a], c.t);
    return cut;
  }
  // The mask as the Slice leaves it, contiguous (the chain after whole
  // scores broadcasts it as Add would): the tensor itself when the cut
  // drops nothing, else the kept part of each block along the cut axis
  // copied into cut_ (float32 or float16, the chain's mask types).
  Tensor cut_mask(const Tensor& mask, const Checked& c) {
    const Shape shape = mask_shape(mask.shape(), c);
    if (shape == mask.shape()) return Tensor(mask.dtype(), shape, const_cast<void*>(mask.raw()));
    const int a = static_cast<int>(cut_axis(mask.shape())), rank = static_cast<int>(shape.size());
    const size_t e = dtype_bytes(mask.dtype(), 1);
    const size_t inner = static_cast<size_t>(dims_product(shape, a + 1, rank)) * e;
    const size_t outer = static_cast<size_t>(dims_product(shape, 0, a));
    const size_t from = static_cast<size_t>(mask.dim(a)) * inner, keep = static_cast<size_t>(shape[static_cast<size_t>(a)]) * inner;
    cut_.resize(outer * keep / sizeof(float) + 1);
    auto* to = reinterpret_cast<unsigned char*>(cut_.data());
    const auto* m = static_cast<const unsigned char*>(mask.raw());
    for (size_t o = 0; o < outer; ++o) std::memcpy(to + o * keep, m + o * from, keep);
    return Tensor(mask.dtype(), shape, cut_.data());
  }

  // rep when Expand of KV [b,kvh,T,d] (as [b,kvh,1,T,d]) to `expand`, then
  // Reshape to `target`, repeats each KV head rep times: [b, kvh·rep, T, d].
  // The values are read in place (run() checks them each step).
  int64_t spelled_repeat(const Shape& kv, const Tensor& expand, const Tensor& target) const {
    if (expand.size() > 5)
      fail("Expand to {} of KV {} is not a repeat of each KV head", shape_str(tensor_to_ints(expand)), shape_str(kv));
    if (target.size() != 4) fail("Reshape to {} is not [b, kvh*rep, T, d]", shape_str(tensor_to_ints(target)));
    int64_t e[5], r[4];
    for (int64_t i = 0; i < expand.size(); ++i) e[i] = tensor_int_at(expand, i);
    for (int64_t i = 0; i < 4; ++i) r[i] = tensor_int_at(target, i);
    return repeat_of(kv, e, expand.size(), r, 4);
  }

  // The same for the n values of `expand` and the m of `target`.
  int64_t repeat_of(const Shape& kv, const int64_t* expand, int64_t n, const int64_t* target, int64_t m) const {
    const int64_t from[5] = {kv[0], kv[1], 1, kv[2], kv[3]};
    int64_t e[5] = {0, 0, 0, 0, 0};
    bool repeat = n <= 5;
    for (int64_t i = 0; i < 5 && repeat; ++i) {
      // Expand broadcasts: each dim equal, or one of the two 1.
      const int64_t dim = i >= 5 - n ? expand[i - (5 - n)] : 1;
      e[i] = dim == from[i] || dim == 1 ? from[i] : from[i] == 1 ? dim : -1;
      repeat = e[i] >= 0 && (i == 2 || e[i] == from[i]);
    }
    if (!repeat)
      fail("Expand to {} of KV {} is not a repeat of each KV head", shape_str(Shape(expand, expand + n)),
           shape_str(kv));
    // Reshape's target: 0 copies e's dim (unless allowzero), -1 infers the rest.
    const int64_t want[4] = {kv[0], checked_mul(kv[1], e[2], "the repeated KV heads"), kv[2], kv[3]};
    bool same = m == 4;
    int64_t known = 1, infer = -1;
    for (int64_t i = 0; i < 4 && same; ++i) {
      int64_t dim = target[i];
      if (dim == 0 && !allowzero_) dim = e[i];
      if (dim == -1) {
        same = infer < 0;
        infer = i;
        continue;
      }
      same = dim == want[i];
      if (same) known = checked_mul(known, dim, "a Reshape target");
    }
    // The one inferred dim is what the others leave of e's elements.
    if (same && infer >= 0) {
      int64_t total = 1;
      for (int64_t dim : e) total = checked_mul(total, dim, "an Expand target");
      same = known != 0 && total % known == 0 && total / known == want[infer];
    }
    if (!same)
      fail("Reshape of {} to {} is not [b, kvh*rep, T, d]", shape_str(Shape(e, e + 5)),
           shape_str(Shape(target, target + m)));
    return e[2];
  }

  // The workspace reshape() asks for: a slot per thread, and for float16 A
  // the widened A and product.
  size_t workspace(DType t, DType kv_dtype, const Shape& a, const Checked& c) const {
    const size_t m = static_cast<size_t>(c.rep * a[2]);
    const size_t slots = slot_bytes(m, static_cast<size_t>(c.t), static_cast<size_t>(c.d), kv_dtype) *
                         static_cast<size_t>(ThreadPool::default_threads());
    int64_t y = 4;
    for (int64_t dim : c.y) y = checked_mul(y, dim, "the scores' bytes");
    // float16 A: A and the product widened (the scores whole when the mask is not rows).
    if (half_path(t, kv_dtype)) return slots + align64(numel(a) * 4) + align64(static_cast<size_t>(y));
    if (!c.rows) return slots + align64(static_cast<size_t>(y));  // the scores whole (mask_any_shape)
    return slots;
  }

  bool trans_b_, allowzero_, state_, masked_, softmax_, nan_to_zero_;
  int64_t kv_repeat_;  // 0: the repeat's shapes are inputs 2 and 3 (or there is none)
  bool any_mask_, mask_to_keys_;
  bool mask_rows_ = true;  // the last reshape's mask was rows over the scores (or there was none)
  int64_t mask_axis_;  // the axis mask_to_keys cuts (negative from the back)
  bool mix_;           // values as inputs 6 and 7: the output is P·V (run_mix)
  // run_mix's heads, reused: skip, the value row it multiplies up to at
  // least, and its blocks' cut; mix_first_[task] is the index of the head's
  // first block among every head's, mix_first_[tasks] the block count.
  struct MixHead {
    bool skip = false;
    int64_t finite_from = 0, span = 1, per_span = 1;
  };
  std::vector<MixHead> mix_heads_;
  std::vector<int64_t> mix_first_;
  float score_scale_;
  std::vector<int64_t> keeps_;  // run's keys kept per row, reused
  std::vector<float> cut_;      // a cut mask made contiguous (cut_mask), reused (its bytes)
  std::vector<float> wide_in_, wide_out_;  // a float16 chain's widened Q and output where the mask is not rows
  const SgemmConfig* config_;
  KvGemmConfig kv_config_;
};

}  // namespace

void register_gqa_matmul_op(OpRegistry& r) {
  r.add(kOneBitDomain, "GqaMatMul", 1, 1, make_factory<GqaMatMulKernel>());
}

}  // namespace onebit
