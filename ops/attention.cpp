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
#include <functional>
#include <limits>

#include "base/thread_pool.h"
#include "graph/op_registry.h"
#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "ops/kv_gemm.h"
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

// n elements of t from offset `off` as float32 into dst (float16: the
// vectorised conversion).
void widen_row(const Tensor& t, int64_t off, int64_t n, float* dst) {
  if (t.dtype() == DType::F32) std::memcpy(dst, t.data<float>() + off, static_cast<size_t>(n) * sizeof(float));
  else if (t.dtype() == DType::F16) vec_math_config().widen(static_cast<size_t>(n), t.data<uint16_t>() + off, dst);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = load_at(t, off + i);
}

// row[j] += t[off + j] for j < n.
void add_row(const Tensor& t, int64_t off, int64_t n, float* row) {
  float run[256];
  for (int64_t j = 0; j < n; j += 256) {
    const int64_t m = std::min<int64_t>(256, n - j);
    widen_row(t, off + j, m, run);
    for (int64_t i = 0; i < m; ++i) row[j + i] += run[i];
  }
}

// One attention problem, as both kernels below see it: the shapes, the
// tensors, and what is added to each score.
struct Problem {
  int64_t b = 0, past = 0, total = 0;
  HeadView q, k, v;
  const Tensor *Q = nullptr, *K = nullptr, *V = nullptr, *past_k = nullptr, *past_v = nullptr;
  const Tensor* qkv_bias = nullptr;  // MultiHeadAttention's bias [hq + hk + hv], added to Q, K and V
  bool out4d = false;
  float scale = 1, softcap = 0;
  // Adds to the T scores of row (b, n, r) after the scale and the soft cap;
  // empty adds nothing.
  std::function<void(int64_t b, int64_t n, int64_t r, float* row)> bias;
  Tensor* out = nullptr;
  Tensor *present_k = nullptr, *present_v = nullptr;
  Tensor* qk = nullptr;  // Attention's qk_matmul_output, in mode qk_mode
  int64_t qk_mode = 0;
};

// The workspace: keys and values as float32 [B, kvN, T, H] (past then new),
// the queries and output as float32 when they are not already, then one slot
// of scores and GEMM workspace per thread.
struct Layout {
  size_t k_at = 0, v_at = 0, q_at = 0, out_at = 0, slots_at = 0, scores = 0, slot = 0, total = 0;
  bool q_copied = false, out_copied = false;
};

Layout layout(const SgemmConfig& config, DType t, bool has_qkv_bias, int64_t b, const HeadView& q, const HeadView& k,
              const HeadView& v, int64_t total) {
  Layout p;
  size_t at = 0;
  auto take = [&](size_t floats) {
    const size_t here = at;
    at += align64(floats * sizeof(float));
    return here;
  };
  p.k_at = take(static_cast<size_t>(b * k.heads * total * k.dim));
  p.v_at = take(static_cast<size_t>(b * k.heads * total * v.dim));
  p.q_copied = t != DType::F32 || has_qkv_bias;
  p.out_copied = t != DType::F32;
  if (p.q_copied) p.q_at = take(static_cast<size_t>(b * q.heads * q.rows * q.dim));
  if (p.out_copied) p.out_at = take(static_cast<size_t>(b * q.heads * q.rows * v.dim));
  p.slots_at = at;
  const size_t s = static_cast<size_t>(q.rows), tn = static_cast<size_t>(std::max<int64_t>(total, 1));
  p.scores = align64(s * tn * sizeof(float));
  p.slot = p.scores + align64(std::max(sgemm_workspace(config, s, tn, static_cast<size_t>(q.dim), false, true),
                                        sgemm_workspace(config, s, static_cast<size_t>(v.dim), tn, false, false)));
  p.total = at + p.slot * static_cast<size_t>(ThreadPool::default_threads());
  return p;
}

void softmax_row(float* r, size_t n) {
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

void store_row(Tensor& t, int64_t off, const float* row, size_t n) {
  if (t.dtype() == DType::F16) return vec_math_config().narrow(n, row, t.data<uint16_t>() + off);
  dispatch_float(t.dtype(), "attention output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>() + off;
    for (size_t j = 0; j < n; ++j) p[j] = Arith<T>::store(static_cast<typename Arith<T>::C>(row[j]));
  });
}

// scores = scale · Q·Kᵀ (soft-capped) + bias, softmax, · V; one task per
// (batch, query head), query head n reading KV head n / (qN / kvN).
void attend(const SgemmConfig& config, ThreadPool& pool, void* workspace, const Problem& p) {
  const HeadView &q = p.q, &k = p.k, &v = p.v;
  const int64_t b = p.b, past = p.past, total = p.total;
  const Layout pl = layout(config, p.Q->dtype(), p.qkv_bias != nullptr, b, q, k, v, total);
  auto* ws = static_cast<unsigned char*>(workspace);
  float* kc = reinterpret_cast<float*>(ws + pl.k_at);
  float* vc = reinterpret_cast<float*>(ws + pl.v_at);
  const int64_t hq = q.heads * q.dim, hk = k.heads * k.dim;
  auto gather = [&](const Tensor* past_t, const Tensor& now, const HeadView& nv, int64_t bias_from, float* dst) {
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t g = 0; g < nv.heads; ++g) {
        float* d = dst + (bi * nv.heads + g) * total * nv.dim;
        if (past_t) widen_row(*past_t, (bi * nv.heads + g) * past * nv.dim, past * nv.dim, d);
        for (int64_t r = 0; r < nv.rows; ++r) {
          const int64_t off = bi * nv.batch_stride + g * nv.head_stride + r * nv.row_stride;
          float* row = d + (past + r) * nv.dim;
          widen_row(now, off, nv.dim, row);
          if (p.qkv_bias) add_row(*p.qkv_bias, bias_from + g * nv.dim, nv.dim, row);
        }
      }
  };
  gather(p.past_k, *p.K, k, hq, kc);
  gather(p.past_v, *p.V, v, hq + hk, vc);
  const float* qf = pl.q_copied ? reinterpret_cast<float*>(ws + pl.q_at) : p.Q->data<float>();
  if (pl.q_copied) {
    // Same layout as Q; the bias (when given) is per hidden column.
    float* dst = const_cast<float*>(qf);
    const int64_t row = p.out4d ? q.dim : hq, rows = row ? p.Q->size() / row : 0;
    for (int64_t i = 0; i < rows; ++i) {
      widen_row(*p.Q, i * row, row, dst + i * row);
      if (p.qkv_bias) add_row(*p.qkv_bias, 0, row, dst + i * row);
    }
  }
  float* out = pl.out_copied ? reinterpret_cast<float*>(ws + pl.out_at) : p.out->data<float>();
  const int64_t out_row = p.out4d ? v.dim : q.heads * v.dim;
  const int64_t rep = q.heads / k.heads, tasks = b * q.heads;
  const KvGemmConfig mix{&config, &kv_config()};
  auto one = [&](int64_t task, unsigned char* slot, ThreadPool* inner) {
    const int64_t bi = task / q.heads, n = task % q.heads, g = n / rep;
    float* sc = reinterpret_cast<float*>(slot);
    void* gws = slot + pl.scores;
    const size_t s = static_cast<size_t>(q.rows), tn = static_cast<size_t>(total);
    const float* a = qf + bi * q.batch_stride + n * q.head_stride;
    sgemm(config, s, tn, static_cast<size_t>(q.dim), a, static_cast<size_t>(q.row_stride), false,
          kc + (bi * k.heads + g) * total * k.dim, static_cast<size_t>(k.dim), true, nullptr, sc, tn, gws, inner);
    for (size_t r = 0; r < s; ++r) {
      float* row = sc + r * tn;
      const int64_t qk_at = ((bi * q.heads + n) * q.rows + static_cast<int64_t>(r)) * total;
      for (size_t j = 0; j < tn; ++j) {
        float x = row[j] * p.scale;
        if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
        row[j] = x;
      }
      if (p.qk && p.qk_mode <= 1) store_row(*p.qk, qk_at, row, tn);
      if (p.bias) p.bias(bi, n, static_cast<int64_t>(r), row);
      if (p.qk && p.qk_mode == 2) store_row(*p.qk, qk_at, row, tn);
      softmax_row(row, tn);
      if (p.qk && p.qk_mode == 3) store_row(*p.qk, qk_at, row, tn);
    }
    float* o = out + (p.out4d ? (bi * q.heads + n) * q.rows * v.dim : bi * q.rows * out_row + n * v.dim);
    // P·V as the GQA kernels run it (ops/kv_gemm.h: the float GEMM's
    // numerics), so a causal prompt's trailing zeros of P are left out.
    kv_mix(mix, s, tn, static_cast<size_t>(v.dim), sc, tn, {vc + (bi * k.heads + g) * total * v.dim, DType::F32}, o,
           static_cast<size_t>(out_row), gws, inner);
  };
  run_task_ranges(pool, tasks, [&](int64_t task, int64_t r, ThreadPool* inner) {
    one(task, ws + pl.slots_at + static_cast<size_t>(r) * pl.slot, inner);
  });
  if (pl.out_copied) store_row(*p.out, 0, out, static_cast<size_t>(p.out->size()));
  if (p.present_k) store_row(*p.present_k, 0, kc, static_cast<size_t>(p.present_k->size()));
  if (p.present_v) store_row(*p.present_v, 0, vc, static_cast<size_t>(p.present_v->size()));
}

// The fields both kernels below fill alike: Q, K, V and their views, the
// past at inputs past_at and past_at + 1, the scale and the outputs 0–2.
Problem problem_of(RunContext& ctx, int64_t q_heads, int64_t kv_heads, int past_at, bool has_scale, float scale) {
  const Tensor& Q = ctx.input(0);
  Problem p;
  p.q = HeadView::of(Q.shape(), q_heads);
  p.k = HeadView::of(ctx.input(1).shape(), kv_heads);
  p.v = HeadView::of(ctx.input(2).shape(), kv_heads);
  p.b = Q.dim(0);
  p.past = ctx.has_input(past_at) ? ctx.input(past_at).dim(2) : 0;
  p.total = p.past + p.k.rows;
  p.Q = &Q, p.K = &ctx.input(1), p.V = &ctx.input(2);
  p.past_k = ctx.has_input(past_at) ? &ctx.input(past_at) : nullptr;
  p.past_v = ctx.has_input(past_at + 1) ? &ctx.input(past_at + 1) : nullptr;
  p.scale = has_scale ? scale : 1.0f / std::sqrt(static_cast<float>(p.q.dim));
  p.out = &ctx.output(0);
  p.present_k = ctx.has_output(1) ? &ctx.output(1) : nullptr;
  p.present_v = ctx.has_output(2) ? &ctx.output(2) : nullptr;
  return p;
}

// Element (b, n, s, j) of `m` broadcast right-aligned to [B, N, S, T]; the
// caller checks j is inside its last dim.
int64_t broadcast_offset(const Shape& sh, int64_t b, int64_t n, int64_t s, int64_t j) {
  const size_t r = sh.size();
  const int64_t idx[4] = {b, n, s, j};
  int64_t off = 0;
  for (size_t i = 0; i < r; ++i) off = off * sh[i] + (sh[i] == 1 ? 0 : idx[4 - r + i]);
  return off;
}

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
    ctx.set_workspace(layout(*config_, t, false, b, q, k, v, total).total);
  }

  void run(RunContext& ctx) override {
    Problem p = problem_of(ctx, q_heads_, kv_heads_, 4, has_scale_, scale_);
    p.out4d = ctx.input(0).rank() == 4;
    p.softcap = softcap_;
    p.qk = ctx.has_output(3) ? &ctx.output(3) : nullptr;
    p.qk_mode = qk_mode_;
    const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const Tensor* nonpad = ctx.has_input(6) ? &ctx.input(6) : nullptr;
    if (mask || nonpad || causal_) {
      const int64_t past = p.past;
      const float ninf = -std::numeric_limits<float>::infinity();
      const bool causal = causal_;
      const int64_t total = p.total;
      auto at = [=](int64_t bi, int64_t n, int64_t r, int64_t j) {
        if (causal && j > past + r) return ninf;
        if (nonpad && j >= tensor_int_at(*nonpad, bi)) return ninf;
        if (!mask) return 0.0f;
        // A mask shorter than T is padded with −∞.
        if (j >= mask->shape().back()) return ninf;
        const int64_t off = broadcast_offset(mask->shape(), bi, n, r, j);
        if (mask->dtype() == DType::Bool) return mask->data<bool>()[off] ? 0.0f : ninf;
        return load_at(*mask, off);
      };
      p.bias = [=](int64_t bi, int64_t n, int64_t r, float* row) {
        for (int64_t j = 0; j < total; ++j) row[j] += at(bi, n, r, j);
      };
    }
    attend(*config_, ctx.pool(), ctx.workspace(), p);
  }

 private:
  const SgemmConfig* config_;
  int64_t q_heads_ = 0, kv_heads_ = 0, qk_mode_ = 0;
  bool causal_ = false, has_scale_ = false;
  float softcap_ = 0, scale_ = 0;
};

// MultiHeadAttention's attributes (GroupedAttention keeps them).
struct MhaAttributes {
  int64_t heads = 0;
  float filter = -10000.0f, scale = 0;
  bool has_scale = false, causal = false;
  explicit MhaAttributes(const Attributes& a)
      : heads(a.get_int("num_heads", 0)), filter(a.get_float("mask_filter_value", -10000.0f)),
        scale(a.get_float("scale", 0.0f)), has_scale(a.has("scale")), causal(a.get_int("unidirectional", 0) != 0) {
    if (heads <= 0) fail("attribute num_heads is {}, expected a positive count", heads);
  }
};

// MultiHeadAttention (com.microsoft 1), at onnxruntime's documented
// semantics (docs/ContribOperators.md), as onnxruntime-genai's builder
// writes it for float16 CPU models:
//   query [B, S, N·H]; key [B, L, N·H] or [B, N, L, H] (the whole key,
//   no past then); value likewise with Hv; bias [N·H + N·H + N·Hv] added to
//   the projections (3-D key and value only); past_key / past_value
//   [B, N, P, H] prepended, present_key / present_value [B, N, P + L, H].
//   scores = scale · Q·Kᵀ (scale default 1/√H) + attention_bias [B|1, N|1,
//   S, T]; key_padding_mask int32 [B] (key lengths), [B, T] or [B, S, T]
//   (0: padding) and unidirectional (keys past P + s) each add
//   mask_filter_value (default −10000), as onnxruntime's CPU kernel does.
//   output [B, S, N·Hv].
// Not implemented, and refused at load by name: packed QKV / KV (5-D query
// or key), the (3B + 2) mask layout, past_sequence_length and
// cache_indirection (buffer sharing, beam search), the qk output.
class MultiHeadAttentionKernel : public Kernel {
 public:
  explicit MultiHeadAttentionKernel(const KernelInfo& info)
      : config_(&sgemm_config()), a_(info.attrs()), heads_(a_.heads) {
    for (int i : {8, 9})
      if (info.has_input(i))
        fail("input {} ({}) is not implemented: 1bit runs MultiHeadAttention without buffer sharing or beams", i,
             i == 8 ? "past_sequence_length" : "cache_indirection");
    if (info.has_output(3)) fail("output qk is not implemented");
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
      fail("input query is {}, expected float, float16 or bfloat16", dtype_name(t));
    if (!ctx.has_input(1) || !ctx.has_input(2))
      fail("inputs key and value are required (packed QKV in query is not implemented)");
    for (int i : {1, 2, 3, 5, 6, 7})
      if (ctx.has_input(i) && ctx.dtype(i) != t)
        fail("input {} is {}, query is {}; they must agree", i, dtype_name(ctx.dtype(i)), dtype_name(t));
    const Shape &qs = ctx.shape(0), &ks = ctx.shape(1), &vs = ctx.shape(2);
    if (qs.size() != 3) fail("query has shape {}, expected [B, S, hidden] (packed QKV is not implemented)", shape_str(qs));
    if ((ks.size() != 3 && ks.size() != 4) || vs.size() != ks.size())
      fail("key {} and value {} must both be [B, L, hidden] or both [B, N, L, H] (packed KV is not implemented)",
           shape_str(ks), shape_str(vs));
    if (qs[2] % heads_ != 0) fail("query {} hidden size is not a multiple of num_heads = {}", shape_str(qs), heads_);
    const HeadView q = HeadView::of(qs, heads_), k = HeadView::of(ks, heads_), v = HeadView::of(vs, heads_);
    const int64_t b = qs[0];
    if (ks[0] != b || vs[0] != b || k.heads != heads_ || v.heads != heads_ || k.dim != q.dim || v.rows != k.rows ||
        (ks.size() == 3 && (ks[2] % heads_ != 0 || vs[2] % heads_ != 0)))
      fail("query {}, key {} and value {} do not agree on batch, num_heads = {}, head size and key length",
           shape_str(qs), shape_str(ks), shape_str(vs), heads_);
    const bool four = ks.size() == 4;
    if (ctx.has_input(3)) {
      if (four) fail("input bias needs 3-D key and value; key is {}", shape_str(ks));
      if (ctx.shape(3) != Shape{q.heads * q.dim + k.heads * k.dim + v.heads * v.dim})
        fail("bias has shape {}, expected [{}]", shape_str(ctx.shape(3)), q.heads * q.dim + k.heads * k.dim + v.heads * v.dim);
    }
    if (ctx.has_input(6) != ctx.has_input(7)) fail("inputs past_key and past_value must be given together");
    int64_t past = 0;
    if (ctx.has_input(6)) {
      if (four) fail("past_key needs 3-D key and value; a 4-D key {} is the whole key", shape_str(ks));
      const Shape &pk = ctx.shape(6), &pv = ctx.shape(7);
      if (pk.size() != 4 || pk[0] != b || pk[1] != heads_ || pk[3] != k.dim || pv != Shape{b, heads_, pk[2], v.dim})
        fail("past_key {} and past_value {} must be [{}, {}, past, {}] and [{}, {}, past, {}]", shape_str(pk),
             shape_str(pv), b, heads_, k.dim, b, heads_, v.dim);
      past = pk[2];
    }
    const int64_t total = past + k.rows;
    if (ctx.has_input(4)) {
      if (ctx.dtype(4) != DType::I32) fail("key_padding_mask is {}, expected int32", dtype_name(ctx.dtype(4)));
      const Shape& m = ctx.shape(4);
      if (m != Shape{b} && m != Shape{b, total} && m != Shape{b, q.rows, total})
        fail("key_padding_mask has shape {}, expected [{}], [{}, {}] or [{}, {}, {}] (the [3B + 2] layout is not "
             "implemented)",
             shape_str(m), b, b, total, b, q.rows, total);
    }
    if (ctx.has_input(5)) {
      const Shape& m = ctx.shape(5);
      if (m.size() != 4 || (m[0] != 1 && m[0] != b) || (m[1] != 1 && m[1] != heads_) || m[2] != q.rows || m[3] != total)
        fail("attention_bias has shape {}, expected [{} or 1, {} or 1, {}, {}]", shape_str(m), b, heads_, q.rows, total);
    }
    ctx.set_output(0, t, {b, q.rows, heads_ * v.dim});
    if (ctx.has_output(1)) ctx.set_output(1, t, {b, heads_, total, k.dim});
    if (ctx.has_output(2)) ctx.set_output(2, t, {b, heads_, total, v.dim});
    ctx.set_workspace(layout(*config_, t, ctx.has_input(3), b, q, k, v, total).total);
  }

  void run(RunContext& ctx) override {
    Problem p = problem_of(ctx, heads_, heads_, 6, a_.has_scale, a_.scale);
    p.qkv_bias = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const Tensor* pad = ctx.has_input(4) ? &ctx.input(4) : nullptr;
    const Tensor* ab = ctx.has_input(5) ? &ctx.input(5) : nullptr;
    if (pad || ab || a_.causal) {
      const int64_t past = p.past, total = p.total, s = p.q.rows;
      const float filter = a_.filter;
      const bool causal = a_.causal;
      p.bias = [=](int64_t bi, int64_t n, int64_t r, float* row) {
        if (pad) {
          const Shape& m = pad->shape();
          const int32_t* keep = pad->data<int32_t>();
          if (m.size() == 1) {
            for (int64_t j = std::max<int64_t>(keep[bi], 0); j < total; ++j) row[j] += filter;
          } else {
            const int32_t* kr = keep + (m.size() == 2 ? bi * total : (bi * s + r) * total);
            for (int64_t j = 0; j < total; ++j)
              if (kr[j] == 0) row[j] += filter;
          }
        }
        if (causal)
          for (int64_t j = past + r + 1; j < total; ++j) row[j] += filter;
        // attention_bias's last dim is T: the row is contiguous.
        if (ab) add_row(*ab, broadcast_offset(ab->shape(), bi, n, r, 0), total, row);
      };
    }
    attend(*config_, ctx.pool(), ctx.workspace(), p);
  }

 private:
  const SgemmConfig* config_;
  MhaAttributes a_;
  int64_t heads_;
};

// com.onebit::GroupedAttention, written by graph/passes/mha_repeat_kv.cpp
// for onnxruntime-genai's float16 CPU attention,
//
//   cache [b,kvh,T,d] -Unsqueeze(2)-> -Expand(e)-> -Reshape(r)-> -Transpose(0,2,1,3)-> -Reshape(f)-> MultiHeadAttention
//
// (the KV heads repeated to the query heads, then flattened to [b, T, N·d]):
// the same attention read from the unrepeated cache. Inputs: query
// [b, S, N·d]; key, value caches [b, kvh, T, d] (float32 or float16);
// attention_bias (optional); e, r, f of the key chain, then of the value
// chain (checked at plan time to be exactly that repeat and flatten, else
// the plan is refused naming the shapes; e and r omitted when the pass
// proved them the repeat of attribute kv_repeat, which is then checked
// against num_heads and the caches' heads); with inputs 10 and 11
// (graph/kv_state.cpp) the caches are KvAppend states whose heads lie that
// many elements apart. MultiHeadAttention's attributes, semantics and
// float16 rounding as above; the products run on ops/kv_gemm.h's kernels
// over the cache as stored.
class GroupedAttentionKernel : public Kernel {
 public:
  explicit GroupedAttentionKernel(const KernelInfo& info)
      : kv_config_(kv_gemm_config()), a_(info.attrs()), heads_(a_.heads),
        kv_repeat_(info.attrs().get_int("kv_repeat", 0)) {
    state_ = info.has_input(10) || info.has_input(11);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16) fail("input query is {}, expected float32 or float16", dtype_name(t));
    for (int i : {1, 2})
      if (ctx.dtype(i) != DType::F32 && ctx.dtype(i) != DType::F16 && (ctx.dtype(i) != DType::I8 || !state_))
        fail("input {} is {}, expected a float32 or float16 cache (or an int8 KV state)", i, dtype_name(ctx.dtype(i)));
    const Shape& q = ctx.shape(0);
    if (q.size() != 3 || q[2] % heads_ != 0)
      fail("query has shape {}, expected [b, S, num_heads·d] with num_heads = {}", shape_str(q), heads_);
    const int64_t b = q[0], s = q[1], d = q[2] / heads_;
    const Shape& k = ctx.shape(1);
    if (k.size() != 4 || k[0] != b || k[3] != d || k[1] <= 0 || heads_ % k[1] != 0 || ctx.shape(2) != k)
      fail("key {} and value {} must be one [{}, kv_heads, T, {}] shape with kv_heads dividing {}", shape_str(k),
           shape_str(ctx.shape(2)), b, d, heads_);
    for (int first : {4, 7}) check_repeat(ctx, k, first);
    for (int i : {10, 11})
      if (ctx.has_input(i)) check_head_stride(ctx, i);
    const int64_t total = k[2];
    if (ctx.has_input(3)) {
      const Shape& m = ctx.shape(3);
      if (ctx.dtype(3) != t || m.size() != 4 || (m[0] != 1 && m[0] != b) || (m[1] != 1 && m[1] != heads_) ||
          m[2] != s || m[3] != total)
        fail("attention_bias is {} {}, expected {} [{} or 1, {} or 1, {}, {}]", dtype_name(ctx.dtype(3)), shape_str(m),
             dtype_name(t), b, heads_, s, total);
    }
    ctx.set_output(0, t, q);
    const Layout l = layout(t, b, s, total, d, ctx.dtype(2));
    ctx.set_workspace(l.total);
  }

  void run(RunContext& ctx) override {
    const Tensor& Q = ctx.input(0);
    const Tensor& K = ctx.input(1);
    const Tensor& V = ctx.input(2);
    const int64_t b = Q.dim(0), s = Q.dim(1), n_all = heads_, d = Q.dim(2) / heads_;
    const int64_t kvh = K.dim(1), total = K.dim(2), past = total - s, rep = n_all / kvh;
    const int64_t ks = ctx.has_input(10) ? *ctx.input(10).data<int64_t>() : total * d;
    const int64_t vs = ctx.has_input(11) ? *ctx.input(11).data<int64_t>() : total * d;
    const Layout l = layout(Q.dtype(), b, s, total, d, V.dtype());
    auto* ws = static_cast<unsigned char*>(ctx.workspace());
    const bool f32 = Q.dtype() == DType::F32;
    const int64_t row = n_all * d;
    float* qf = f32 ? Q.data<float>() : reinterpret_cast<float*>(ws + l.q_at);
    if (!f32) vec_math_config().widen(static_cast<size_t>(Q.size()), Q.data<uint16_t>(), qf);
    float* out = f32 ? ctx.output(0).data<float>() : reinterpret_cast<float*>(ws + l.out_at);
    const float scale = a_.has_scale ? a_.scale : 1.0f / std::sqrt(static_cast<float>(d));
    const Tensor* ab = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    // The strides checked before any task runs.
    kv_state_head(K.raw(), K.dtype(), ks, 0, total, d);
    kv_state_head(V.raw(), V.dtype(), vs, 0, total, d);
    const size_t sz = static_cast<size_t>(s), tz = static_cast<size_t>(total), dz = static_cast<size_t>(d);
    auto one = [&](int64_t task, unsigned char* slot, ThreadPool* inner) {
      const int64_t bi = task / n_all, n = task % n_all, g = n / rep;
      float* sc = reinterpret_cast<float*>(slot);
      const KvRows krows = kv_state_head(K.raw(), K.dtype(), ks, bi * kvh + g, total, d);
      const KvRows vrows = kv_state_head(V.raw(), V.dtype(), vs, bi * kvh + g, total, d);
      kv_scores(kv_config_, sz, tz, dz, qf + bi * s * row + n * d, static_cast<size_t>(row), krows, sc, tz, inner);
      for (int64_t r = 0; r < s; ++r) {
        float* sr = sc + r * total;
        for (int64_t j = 0; j < total; ++j) sr[j] *= scale;
        if (a_.causal)
          for (int64_t j = past + r + 1; j < total; ++j) sr[j] += a_.filter;
        if (ab) add_row(*ab, broadcast_offset(ab->shape(), bi, n, r, 0), total, sr);
        softmax_row(sr, tz);
      }
      kv_mix(kv_config_, sz, tz, dz, sc, tz, vrows, out + bi * s * row + n * d, static_cast<size_t>(row),
             slot + l.scores, inner);
    };
    run_task_ranges(ctx.pool(), b * n_all, [&](int64_t task, int64_t r, ThreadPool* inner) {
      one(task, ws + l.slots_at + static_cast<size_t>(r) * l.slot, inner);
    });
    if (!f32) vec_math_config().narrow(static_cast<size_t>(Q.size()), out, ctx.output(0).data<uint16_t>());
  }

  std::string describe() const override {
    return fmt::format("{} heads over unrepeated KV{}, {}", heads_, state_ ? " (the KV state)" : "", kv_config_.kv->qk_name);
  }

 private:
  struct Layout {
    size_t q_at = 0, out_at = 0, slots_at = 0, scores = 0, slot = 0, total = 0;
  };
  Layout layout(DType t, int64_t b, int64_t s, int64_t total, int64_t d, DType v) const {
    Layout l;
    const size_t rows = static_cast<size_t>(b * s * heads_ * d);
    if (t != DType::F32) {
      l.q_at = 0;
      l.out_at = align64(rows * sizeof(float));
      l.slots_at = 2 * l.out_at;
    }
    l.scores = align64(static_cast<size_t>(s * std::max<int64_t>(total, 1)) * sizeof(float));
    l.slot = l.scores + align64(kv_mix_workspace(kv_config_, static_cast<size_t>(s), static_cast<size_t>(total),
                                                 static_cast<size_t>(d), v));
    l.total = l.slots_at + l.slot * static_cast<size_t>(ThreadPool::default_threads());
    return l;
  }

  // Inputs first, first + 1, first + 2: the Expand, Reshape and flattening
  // Reshape targets of one cache's chain, which must repeat each KV head to
  // num_heads and flatten [b, T, num_heads, d] to [b, T, num_heads·d].
  // Without the Expand and Reshape targets (the pass proved them the cache's
  // dims with attribute kv_repeat as the repeat), the values they hold are
  // made from the cache's shape and checked the same way.
  void check_repeat(ReshapeContext& ctx, const Shape& kv, int first) const {
    const int64_t rep = heads_ / kv[1];
    const bool proven = !ctx.has_input(first) && !ctx.has_input(first + 1);
    if (!proven && !(ctx.has_input(first) && ctx.has_input(first + 1)))
      fail("inputs {} and {} (the repeat's Expand and Reshape targets): one is omitted", first, first + 1);
    if (proven && (kv_repeat_ < 1 || kv_repeat_ > heads_))
      fail("inputs {} and {} omitted, with kv_repeat = {}: expected 1 to num_heads = {}", first, first + 1, kv_repeat_,
           heads_);
    const std::vector<int64_t> ev = proven ? std::vector<int64_t>{kv[0], kv[1], kv_repeat_, kv[2], kv[3]}
                                           : tensor_to_ints(ctx.value(first));
    const Shape e = broadcast_shapes({Shape{kv[0], kv[1], 1, kv[2], kv[3]}, ev});
    if (e != Shape{kv[0], kv[1], rep, kv[2], kv[3]})
      fail("Expand to {} of the cache {} is not a repeat of each KV head {} times", shape_str(e), shape_str(kv), rep);
    // Proven, kv_repeat is rep now, so kv[1]·kv_repeat is num_heads: no overflow.
    const std::vector<int64_t> rv = proven ? std::vector<int64_t>{kv[0], kv[1] * kv_repeat_, kv[2], kv[3]}
                                           : tensor_to_ints(ctx.value(first + 1));
    const Shape r = resolve_reshape(e, rv, false);
    if (r != Shape{kv[0], heads_, kv[2], kv[3]})
      fail("Reshape of {} to {} is not [b, num_heads, T, d]", shape_str(e), shape_str(r));
    const Shape t{kv[0], kv[2], heads_, kv[3]};
    const Shape f = resolve_reshape(t, tensor_to_ints(ctx.value(first + 2)), false);
    if (f != Shape{kv[0], kv[2], heads_ * kv[3]})
      fail("Reshape of {} to {} is not [b, T, num_heads·d]", shape_str(t), shape_str(f));
  }

  KvGemmConfig kv_config_;
  MhaAttributes a_;
  int64_t heads_;
  int64_t kv_repeat_ = 0;  // 0: e and r are inputs
  bool state_ = false;
};

}  // namespace

void register_attention_op(OpRegistry& r) {
  r.add_versions("", "Attention", {23, 24}, make_factory<AttentionKernel>());  // 24: nonpad_kv_seqlen
  r.add(kMicrosoftDomain, "MultiHeadAttention", 1, 1, make_factory<MultiHeadAttentionKernel>());
  r.add(kOneBitDomain, "GroupedAttention", 1, 1, make_factory<GroupedAttentionKernel>());
}

}  // namespace onebit
