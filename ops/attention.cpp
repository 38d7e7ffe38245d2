// Attention (ai.onnx 23; 24 adds nonpad_kv_seqlen): scaled dot-product
// attention over query heads grouped onto KV heads, as torch.onnx writes it
// for scaled_dot_product_attention at opset 23+. Semantics of the onnx
// reference (onnx/reference/ops/op_attention.py):
//
//   Q [B, qN, S, H] or [B, S, qN·H] (q_num_heads); K [B, kvN, L, H] or
//   [B, L, kvN·H]; V [B, kvN, L, Hv] or [B, L, kvN·Hv] (kv_num_heads);
//   past_key / past_value [B, kvN, P, H|Hv] are prepended: T = P + L keys,
//   and present_key / present_value are those [B, kvN, T, H|Hv].
//   scores = scale · Q·Kᵀ (scale default 1/√H), soft-capped (softcap),
//   + the mask: attn_mask bool (false: −∞) or float (added), broadcast to
//   [B, qN, S, T] and padded with −∞ past its last dim; is_causal masks
//   keys j > P + s; nonpad_kv_seqlen[b] masks keys j ≥ it.
//   Y = softmax(scores)·V, [B, qN, S, Hv] or [B, S, qN·Hv]; rows with every
//   key masked are NaN, as the reference's softmax makes them.
//   qk_matmul_output (output 3): mode 0/1 the soft-capped product, 2 with the
//   mask added, 3 the softmax.
// Query head n reads KV head n / (qN / kvN). Float16 / bfloat16 / double
// inputs are widened to float32 in the workspace; the products run on the
// float GEMM (ops/sgemm.h), one per (batch, query head).
#include <cmath>
#include <cstring>
#include <limits>

#include "base/thread_pool.h"
#include "graph/op_registry.h"
#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "ops/sgemm.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// Where element (b, head, row, i) of a 3D or 4D Q/K/V lies.
struct HeadView {
  int64_t heads = 0, rows = 0, dim = 0;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  static HeadView of(const Shape& s, int64_t heads) {
    HeadView v;
    if (s.size() == 4) {
      v.heads = s[1], v.rows = s[2], v.dim = s[3];
      v.row_stride = v.dim, v.head_stride = v.rows * v.dim, v.batch_stride = v.heads * v.head_stride;
    } else {
      v.heads = heads, v.rows = s[1], v.dim = s[2] / heads;
      v.head_stride = v.dim, v.row_stride = s[2], v.batch_stride = v.rows * s[2];
    }
    return v;
  }
};

float load_at(const Tensor& t, int64_t i) { return static_cast<float>(tensor_double_at(t, i)); }

class AttentionKernel : public Kernel {
 public:
  explicit AttentionKernel(const KernelInfo& info) : config_(&sgemm_config()) {
    const Attributes& a = info.attrs();
    q_heads_ = a.get_int("q_num_heads", 0);
    kv_heads_ = a.get_int("kv_num_heads", 0);
    causal_ = a.get_int("is_causal", 0) != 0;
    softcap_ = a.get_float("softcap", 0.0f);
    has_scale_ = a.has("scale");
    scale_ = a.get_float("scale", 0.0f);
    qk_mode_ = a.get_int("qk_matmul_output_mode", 0);
    if (qk_mode_ < 0 || qk_mode_ > 3) fail("attribute qk_matmul_output_mode is {}, expected 0 to 3", qk_mode_);
    if (info.has_input(6) && info.opset() < 24) fail("input nonpad_kv_seqlen needs ai.onnx opset 24; this node is opset {}", info.opset());
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::F64)
      fail("input Q is {}, expected a float type", dtype_name(t));
    for (int i : {1, 2, 4, 5})
      if (ctx.has_input(i) && ctx.dtype(i) != t)
        fail("input {} is {}, Q is {}; they must agree", i, dtype_name(ctx.dtype(i)), dtype_name(t));
    const Shape &qs = ctx.shape(0), &ks = ctx.shape(1), &vs = ctx.shape(2);
    if (qs.size() != ks.size() || qs.size() != vs.size() || (qs.size() != 3 && qs.size() != 4))
      fail("Q {}, K {} and V {} must all be 3D or all 4D", shape_str(qs), shape_str(ks), shape_str(vs));
    if (qs.size() == 3 && (q_heads_ <= 0 || kv_heads_ <= 0))
      fail("3D inputs need attributes q_num_heads and kv_num_heads (got {} and {})", q_heads_, kv_heads_);
    const HeadView q = HeadView::of(qs, q_heads_), k = HeadView::of(ks, kv_heads_), v = HeadView::of(vs, kv_heads_);
    const int64_t b = qs[0];
    if (ks[0] != b || vs[0] != b) fail("Q {}, K {} and V {} differ in batch", shape_str(qs), shape_str(ks), shape_str(vs));
    if (k.heads != v.heads || k.rows != v.rows || k.dim != q.dim || k.heads == 0 || q.heads % k.heads != 0)
      fail("Q {} ({} heads), K {} and V {} ({} heads): expected K's head size to be Q's, K and V to agree, and the "
           "query heads a multiple of the KV heads",
           shape_str(qs), q.heads, shape_str(ks), shape_str(vs), k.heads);
    int64_t past = 0;
    if (ctx.has_input(4) != ctx.has_input(5)) fail("inputs past_key and past_value must be given together");
    if (ctx.has_input(4)) {
      const Shape &pk = ctx.shape(4), &pv = ctx.shape(5);
      if (pk.size() != 4 || pk[0] != b || pk[1] != k.heads || pk[3] != k.dim || pv.size() != 4 || pv[0] != b ||
          pv[1] != k.heads || pv[2] != pk[2] || pv[3] != v.dim)
        fail("past_key {} and past_value {} must be [{}, {}, past, {}] and [{}, {}, past, {}]", shape_str(pk),
             shape_str(pv), b, k.heads, k.dim, b, k.heads, v.dim);
      past = pk[2];
    }
    const int64_t total = past + k.rows;
    if (ctx.has_input(3)) {
      const Shape& m = ctx.shape(3);
      if (m.empty() || m.size() > 4 || m.back() > total)
        fail("attn_mask {} does not broadcast to [{}, {}, {}, {}]", shape_str(m), b, q.heads, q.rows, total);
      const Shape full{b, q.heads, q.rows, total};
      for (size_t i = 0; i + 1 < m.size(); ++i) {
        const int64_t want = full[4 - m.size() + i];
        if (m[i] != 1 && m[i] != want)
          fail("attn_mask {} does not broadcast to [{}, {}, {}, {}]", shape_str(m), b, q.heads, q.rows, total);
      }
      if (ctx.dtype(3) != DType::Bool && ctx.dtype(3) != t)
        fail("attn_mask is {}, expected bool or {}", dtype_name(ctx.dtype(3)), dtype_name(t));
    }
    if (ctx.has_input(6) && numel(ctx.shape(6)) != b)
      fail("nonpad_kv_seqlen has shape {}, expected [{}]", shape_str(ctx.shape(6)), b);
    if (qs.size() == 4) ctx.set_output(0, t, {b, q.heads, q.rows, v.dim});
    else ctx.set_output(0, t, {b, q.rows, q.heads * v.dim});
    if (ctx.has_output(1)) ctx.set_output(1, t, {b, k.heads, total, k.dim});
    if (ctx.has_output(2)) ctx.set_output(2, t, {b, k.heads, total, v.dim});
    if (ctx.has_output(3)) ctx.set_output(3, t, {b, q.heads, q.rows, total});
    const Plan p = plan(t, b, q, k, v, total);
    ctx.set_workspace(p.total);
  }

  void run(RunContext& ctx) override {
    const Tensor& Q = ctx.input(0);
    const HeadView q = HeadView::of(Q.shape(), q_heads_), k = HeadView::of(ctx.input(1).shape(), kv_heads_),
                   v = HeadView::of(ctx.input(2).shape(), kv_heads_);
    const int64_t b = Q.dim(0), past = ctx.has_input(4) ? ctx.input(4).dim(2) : 0, total = past + k.rows;
    const DType t = Q.dtype();
    const bool f32 = t == DType::F32;
    const Plan pl = plan(t, b, q, k, v, total);
    auto* ws = static_cast<unsigned char*>(ctx.workspace());
    // The keys and values as [B, kvN, T, H] float32 (past then new), and the queries as float32.
    float* kc = reinterpret_cast<float*>(ws + pl.k_at);
    float* vc = reinterpret_cast<float*>(ws + pl.v_at);
    auto gather = [&](const Tensor* past_t, const Tensor& now, const HeadView& nv, float* dst) {
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t g = 0; g < nv.heads; ++g) {
          float* d = dst + (bi * nv.heads + g) * total * nv.dim;
          if (past_t) {
            const int64_t off = (bi * nv.heads + g) * past * nv.dim;
            for (int64_t i = 0; i < past * nv.dim; ++i) d[i] = load_at(*past_t, off + i);
          }
          for (int64_t r = 0; r < nv.rows; ++r) {
            const int64_t off = bi * nv.batch_stride + g * nv.head_stride + r * nv.row_stride;
            float* row = d + (past + r) * nv.dim;
            if (f32) std::memcpy(row, now.data<float>() + off, static_cast<size_t>(nv.dim) * sizeof(float));
            else
              for (int64_t i = 0; i < nv.dim; ++i) row[i] = load_at(now, off + i);
          }
        }
    };
    gather(ctx.has_input(4) ? &ctx.input(4) : nullptr, ctx.input(1), k, kc);
    gather(ctx.has_input(5) ? &ctx.input(5) : nullptr, ctx.input(2), v, vc);
    const float* qf = f32 ? Q.data<float>() : reinterpret_cast<float*>(ws + pl.q_at);
    if (!f32)
      for (int64_t i = 0; i < Q.size(); ++i) const_cast<float*>(qf)[i] = load_at(Q, i);
    float* out = f32 ? ctx.output(0).data<float>() : reinterpret_cast<float*>(ws + pl.out_at);
    const bool out4d = Q.rank() == 4;
    const int64_t out_row = out4d ? v.dim : q.heads * v.dim;

    const float scale = has_scale_ ? scale_ : 1.0f / std::sqrt(static_cast<float>(q.dim));
    const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const Tensor* nonpad = ctx.has_input(6) ? &ctx.input(6) : nullptr;
    Tensor* qk = ctx.has_output(3) ? &ctx.output(3) : nullptr;
    const int64_t rep = q.heads / k.heads, tasks = b * q.heads;
    auto one = [&](int64_t task, unsigned char* slot, ThreadPool* inner) {
      const int64_t bi = task / q.heads, n = task % q.heads, g = n / rep;
      float* sc = reinterpret_cast<float*>(slot);
      void* gws = slot + pl.scores;
      const size_t s = static_cast<size_t>(q.rows), tn = static_cast<size_t>(total);
      const float* a = qf + bi * q.batch_stride + n * q.head_stride;
      sgemm(*config_, s, tn, static_cast<size_t>(q.dim), a, static_cast<size_t>(q.row_stride), false,
            kc + (bi * k.heads + g) * total * k.dim, static_cast<size_t>(k.dim), true, nullptr, sc, tn, gws, inner);
      const int64_t keep = nonpad ? tensor_int_at(*nonpad, bi) : total;
      for (size_t r = 0; r < s; ++r) {
        float* row = sc + r * tn;
        float* qk_row = qk ? nullptr : nullptr;
        for (size_t j = 0; j < tn; ++j) {
          float x = row[j] * scale;
          if (softcap_ > 0) x = softcap_ * std::tanh(x / softcap_);
          row[j] = x;
        }
        if (qk && qk_mode_ <= 1) store_row(*qk, ((bi * q.heads + n) * q.rows + static_cast<int64_t>(r)) * total, row, tn);
        for (size_t j = 0; j < tn; ++j) {
          const int64_t jj = static_cast<int64_t>(j);
          float bias = 0;
          if (mask) bias = mask_at(*mask, bi, n, static_cast<int64_t>(r), jj, b, q.heads, q.rows, total);
          if (causal_ && jj > past + static_cast<int64_t>(r)) bias = -std::numeric_limits<float>::infinity();
          if (jj >= keep) bias = -std::numeric_limits<float>::infinity();
          row[j] += bias;
        }
        if (qk && qk_mode_ == 2) store_row(*qk, ((bi * q.heads + n) * q.rows + static_cast<int64_t>(r)) * total, row, tn);
        softmax(row, tn);
        if (qk && qk_mode_ == 3) store_row(*qk, ((bi * q.heads + n) * q.rows + static_cast<int64_t>(r)) * total, row, tn);
        (void)qk_row;
      }
      float* o = out + (out4d ? (bi * q.heads + n) * q.rows * v.dim : bi * q.rows * out_row + n * v.dim);
      sgemm(*config_, s, static_cast<size_t>(v.dim), tn, sc, tn, false, vc + (bi * k.heads + g) * total * v.dim,
            static_cast<size_t>(v.dim), false, nullptr, o, static_cast<size_t>(out_row), gws, inner);
    };
    ThreadPool& pool = ctx.pool();
    run_task_ranges(pool, tasks, [&](int64_t task, int64_t r, ThreadPool* inner) {
      one(task, ws + pl.slots_at + static_cast<size_t>(r) * pl.slot, inner);
    });
    if (!f32) store(ctx.output(0), out);
    if (ctx.has_output(1)) store(ctx.output(1), kc);
    if (ctx.has_output(2)) store(ctx.output(2), vc);
  }

 private:
  struct Plan {
    size_t k_at = 0, v_at = 0, q_at = 0, out_at = 0, slots_at = 0, scores = 0, slot = 0, total = 0;
  };

  Plan plan(DType t, int64_t b, const HeadView& q, const HeadView& k, const HeadView& v, int64_t total) const {
    Plan p;
    size_t at = 0;
    auto take = [&](size_t floats) {
      const size_t here = at;
      at += align64(floats * sizeof(float));
      return here;
    };
    p.k_at = take(static_cast<size_t>(b * k.heads * total * k.dim));
    p.v_at = take(static_cast<size_t>(b * k.heads * total * v.dim));
    if (t != DType::F32) {
      p.q_at = take(static_cast<size_t>(b * q.heads * q.rows * q.dim));
      p.out_at = take(static_cast<size_t>(b * q.heads * q.rows * v.dim));
    }
    p.slots_at = at;
    const size_t s = static_cast<size_t>(q.rows), tn = static_cast<size_t>(std::max<int64_t>(total, 1));
    p.scores = align64(s * tn * sizeof(float));
    p.slot = p.scores + align64(std::max(sgemm_workspace(*config_, s, tn, static_cast<size_t>(q.dim), false, true),
                                          sgemm_workspace(*config_, s, static_cast<size_t>(v.dim), tn, false, false)));
    p.total = at + p.slot * static_cast<size_t>(ThreadPool::default_threads());
    return p;
  }

  // The mask's value for (b, n, s, j), broadcast right-aligned; past its last dim −∞.
  static float mask_at(const Tensor& m, int64_t b, int64_t n, int64_t s, int64_t j, int64_t B, int64_t N, int64_t S,
                       int64_t T) {
    (void)B, (void)N, (void)S, (void)T;
    const Shape& sh = m.shape();
    const size_t r = sh.size();
    if (j >= sh.back()) return m.dtype() == DType::Bool ? -std::numeric_limits<float>::infinity()
                                                        : -std::numeric_limits<float>::infinity();
    const int64_t idx[4] = {b, n, s, j};
    int64_t off = 0;
    for (size_t i = 0; i < r; ++i) {
      const int64_t d = sh[i];
      const int64_t x = idx[4 - r + i];
      off = off * d + (d == 1 ? 0 : x);
    }
    if (m.dtype() == DType::Bool) return m.data<bool>()[off] ? 0.0f : -std::numeric_limits<float>::infinity();
    return load_at(m, off);
  }

  static void softmax(float* r, size_t n) {
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < n; ++j) mx = std::max(mx, r[j]);
    if (mx == -std::numeric_limits<float>::infinity() || std::isnan(mx)) {
      // Every key masked: the reference's softmax gives NaN (−∞ − −∞).
      for (size_t j = 0; j < n; ++j) r[j] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
    for (size_t j = 0; j < n; ++j) r[j] -= mx;
    vec_math_config().exp(n, r, r);
    double sum = 0;
    for (size_t j = 0; j < n; ++j) sum += r[j];
    const float inv = static_cast<float>(1.0 / sum);
    for (size_t j = 0; j < n; ++j) r[j] *= inv;
  }

  static void store_row(Tensor& t, int64_t off, const float* row, size_t n) {
    dispatch_float(t.dtype(), "Attention output", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = t.data<T>() + off;
      for (size_t j = 0; j < n; ++j) p[j] = Arith<T>::store(static_cast<typename Arith<T>::C>(row[j]));
    });
  }
  static void store(Tensor& t, const float* src) { store_row(t, 0, src, static_cast<size_t>(t.size())); }

  const SgemmConfig* config_;
  int64_t q_heads_ = 0, kv_heads_ = 0, qk_mode_ = 0;
  bool causal_ = false, has_scale_ = false;
  float softcap_ = 0, scale_ = 0;
};

}  // namespace

void register_attention_op(OpRegistry& r) {
  r.add_versions("", "Attention", {23, 24}, make_factory<AttentionKernel>());  // 24: nonpad_kv_seqlen
}

}  // namespace onebit
