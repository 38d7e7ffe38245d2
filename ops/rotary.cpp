// com.onebit::RotaryHalf(x [..., d], cos, sin), half — written by
// graph/rotary_fusion.cpp. y = x·cos + rotate_half(x)·sin with
// rotate_half(x) = concat(-x[..., half:], x[..., :half]); cos and sin
// broadcast to x (multidirectionally, as the Mul nodes did). Each element
// is computed with the float operations of the unfused nodes, in their
// order, so the result is bit-identical; on float16 (a float16 export)
// each of those operations rounds to float16 as the node did.
#include <vector>

#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "graph/op_registry.h"
#include "base/thread_pool.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// Element strides of `s` when broadcast to `out` (0 on broadcast dims).
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t d = s.size() - 1 - i, od = out.size() - 1 - i;
    st[od] = s[d] == 1 ? 0 : stride;
    stride *= s[d];
  }
  return st;
}

// RotaryHalf's rows: x viewed as rows of d, and where each row's cos and sin
// start once broadcast to x.
struct HalfRows {
  Shape shape;
  int64_t d = 0, rows = 0;
  std::vector<int64_t> cs, ss;
  explicit HalfRows(RunContext& ctx)
      : shape(ctx.input(0).shape()), d(shape.back()), rows(ctx.input(0).size() / d),
        cs(broadcast_strides(ctx.input(1).shape(), shape)), ss(broadcast_strides(ctx.input(2).shape(), shape)) {}
  // Offsets of row r's cos and sin.
  void offsets(int64_t r, int64_t& co, int64_t& so) const {
    int64_t rem = r;
    co = so = 0;
    for (size_t k = shape.size() - 1; k-- > 0;) {
      const int64_t i = rem % shape[k];
      rem /= shape[k];
      co += i * cs[k];
      so += i * ss[k];
    }
  }
};

class RotaryHalfKernel : public Kernel {
 public:
  explicit RotaryHalfKernel(const KernelInfo& info) : half_(info.attrs().get_int("half")) {}

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16) fail("input 0 is {}, expected float32 or float16", dtype_name(t));
    for (int i = 1; i < 3; ++i)
      if (ctx.dtype(i) != t) fail("input {} is {}, x is {}; they must agree", i, dtype_name(ctx.dtype(i)), dtype_name(t));
    const Shape& x = ctx.shape(0);
    if (x.empty() || x.back() != 2 * half_)
      fail("x {} must have a last dim of 2 * half = {}", shape_str(x), 2 * half_);
    const Shape out = broadcast_shapes({x, ctx.shape(1), ctx.shape(2)});
    if (out != x) fail("cos {} and sin {} must broadcast to x {}", shape_str(ctx.shape(1)), shape_str(ctx.shape(2)), shape_str(x));
    if (ctx.shape(1).empty() || ctx.shape(1).back() != x.back() || ctx.shape(2).empty() || ctx.shape(2).back() != x.back())
      fail("cos {} and sin {} must span the last dim of x {}", shape_str(ctx.shape(1)), shape_str(ctx.shape(2)), shape_str(x));
    ctx.set_output(0, t, x);
  }

  void run(RunContext& ctx) override {
    if (ctx.input(0).dtype() == DType::F16) return run_half(ctx);
    const HalfRows rw(ctx);
    const int64_t d = rw.d, h = half_;
    const float* x = ctx.input(0).data<float>();
    const float* cos = ctx.input(1).data<float>();
    const float* sin = ctx.input(2).data<float>();
    float* y = ctx.output(0).data<float>();
    const int64_t grain = std::max<int64_t>(1, 2048 / d);
    ctx.pool().parallel_for(rw.rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t co, so;
        rw.offsets(r, co, so);
        const float* xr = x + r * d;
        const float* cr = cos + co;
        const float* sr = sin + so;
        float* yr = y + r * d;
        for (int64_t j = 0; j < h; ++j) yr[j] = xr[j] * cr[j] + (-xr[j + h]) * sr[j];
        for (int64_t j = h; j < d; ++j) yr[j] = xr[j] * cr[j] + xr[j - h] * sr[j];
      }
    });
  }

 private:
  // float16: Mul, Neg, Mul, Add each rounded to float16, as the unfused nodes.
  void run_half(RunContext& ctx) const {
    const HalfRows rw(ctx);
    const int64_t d = rw.d, h = half_;
    const uint16_t* x = ctx.input(0).data<uint16_t>();
    const uint16_t* cos = ctx.input(1).data<uint16_t>();
    const uint16_t* sin = ctx.input(2).data<uint16_t>();
    uint16_t* y = ctx.output(0).data<uint16_t>();
    const VecMathConfig& vm = vec_math_config();
    ctx.pool().parallel_for(rw.rows, std::max<int64_t>(1, 2048 / d), [&](int64_t begin, int64_t end) {
      // Rows widened (exactly), each product rounded to float16 and back
      // (narrow, widen), the sum rounded once: the nodes' arithmetic.
      std::vector<float> buf(static_cast<size_t>(5 * d));
      float *xf = buf.data(), *cf = xf + d, *sf = cf + d, *a = sf + d, *b = a + d;
      std::vector<uint16_t> round(static_cast<size_t>(d));
      auto to_half_and_back = [&](float* v) {
        vm.narrow(static_cast<size_t>(d), v, round.data());
        vm.widen(static_cast<size_t>(d), round.data(), v);
      };
      for (int64_t r = begin; r < end; ++r) {
        int64_t co, so;
        rw.offsets(r, co, so);
        vm.widen(static_cast<size_t>(d), x + r * d, xf);
        vm.widen(static_cast<size_t>(d), cos + co, cf);
        vm.widen(static_cast<size_t>(d), sin + so, sf);
        for (int64_t j = 0; j < d; ++j) {
          a[j] = xf[j] * cf[j];
          b[j] = (j < h ? -xf[j + h] : xf[j - h]) * sf[j];
        }
        to_half_and_back(a);
        to_half_and_back(b);
        for (int64_t j = 0; j < d; ++j) a[j] += b[j];
        vm.narrow(static_cast<size_t>(d), a, y + r * d);
      }
    });
  }

  int64_t half_;
};

// Heads up to this size take the float16 row path below.
constexpr int64_t kWideRow = 512;

// One float16 head: y1 = cos·x1 − sin·x2, y2 = sin·x1 + cos·x2 in float (as
// the generic loop computes them), the first `rot` dims rotated (halves
// `half` apart, or pairs when interleaved), the rest copied.
void rotate_half_row(const Half* x, const Half* cos, const Half* sin, Half* y, int64_t h, int64_t rot, int64_t half,
                     bool interleaved) {
  const VecMathConfig& vm = vec_math_config();
  float xf[kWideRow], cf[kWideRow / 2], sf[kWideRow / 2];
  vm.widen(static_cast<size_t>(h), &x->bits, xf);
  vm.widen(static_cast<size_t>(half), &cos->bits, cf);
  vm.widen(static_cast<size_t>(half), &sin->bits, sf);
  float yf[kWideRow];
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, c = interleaved ? 2 * i + 1 : i + half;
    yf[a] = cf[i] * xf[a] - sf[i] * xf[c];
    yf[c] = sf[i] * xf[a] + cf[i] * xf[c];
  }
  for (int64_t i = rot; i < h; ++i) yf[i] = xf[i];
  vm.narrow(static_cast<size_t>(h), yf, &y->bits);
}

// RotaryEmbedding (ai.onnx 23), as torch.onnx writes it at opset 23+ (the
// onnx reference: onnx/reference/ops/op_rotary_embedding.py):
//   X [B, N, S, H], or [B, S, N·H] with num_heads; the first R dims of each
//   head rotate (rotary_embedding_dim, 0: all H), the rest pass through.
//   cos_cache, sin_cache [B, S, R/2], or [max_position, R/2] indexed by
//   position_ids [B, S]. interleaved: pairs (x[2i], x[2i+1]); else halves
//   (x[i], x[i + R/2]). y1 = cos·x1 − sin·x2, y2 = sin·x1 + cos·x2.
//
// RotaryEmbedding (com.microsoft 1), onnxruntime's contrib op
// (docs/ContribOperators.md), as onnxruntime-genai's builder writes it: the
// same rotation on inputs (input, position_ids, cos_cache, sin_cache), the
// caches always [max_position, R/2], position_ids [B, S] or [1] (an offset:
// position p + s). A 3-D input without num_heads has heads of 2 · (the
// caches' last dim); rotary_embedding_dim needs num_heads, as onnxruntime
// checks. Refused at load: is_packed_batching, and a scale other than 1.
class RotaryEmbeddingKernel : public Kernel {
 public:
  explicit RotaryEmbeddingKernel(const KernelInfo& info)
      : contrib_(info.node().domain == kMicrosoftDomain), heads_(info.attrs().get_int("num_heads", 0)),
        rot_(info.attrs().get_int("rotary_embedding_dim", 0)),
        interleaved_(info.attrs().get_int("interleaved", 0) != 0) {
    if (contrib_) {
      x_ = 0, pos_ = 1, cos_ = 2, sin_ = 3;
      if (info.attrs().get_int("is_packed_batching", 0) != 0) fail("attribute is_packed_batching = 1 is not implemented");
      const float scale = info.attrs().get_float("scale", 1.0f);
      if (scale != 1.0f) fail("attribute scale = {} is not implemented (only 1)", scale);
      if (rot_ > 0 && heads_ <= 0) fail("attribute rotary_embedding_dim = {} needs num_heads", rot_);
    }
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(x_);
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
      fail("input X is {}, expected float, float16 or bfloat16", dtype_name(t));
    for (int i : {cos_, sin_})
      if (ctx.dtype(i) != t) fail("input {} is {}, X is {}; they must agree", i, dtype_name(ctx.dtype(i)), dtype_name(t));
    const Shape& x = ctx.shape(x_);
    const Shape& c = ctx.shape(cos_);
    if (x.size() != 3 && x.size() != 4) fail("input X has shape {}, expected [B, N, S, H] or [B, S, hidden]", shape_str(x));
    const Heads hd = heads(x, c);
    if (x.size() == 3 && (hd.n <= 0 || hd.h <= 0 || x[2] != hd.n * hd.h))
      fail("3D input X {} needs num_heads (or caches) that divide its hidden size (num_heads = {}, head size {})",
           shape_str(x), heads_, hd.h);
    const int64_t b = x[0], s = x.size() == 4 ? x[2] : x[1];
    if (hd.rot > hd.h || hd.rot % 2 != 0 || hd.rot <= 0)
      fail("rotary_embedding_dim {} must be even, positive and at most the head size {}", hd.rot, hd.h);
    const bool ids = pos_ >= 0 && ctx.has_input(pos_);
    if (contrib_ && !ids) fail("input position_ids is required");
    if (ids) {
      const Shape& p = ctx.shape(pos_);
      if (!dtype_is_integer(ctx.dtype(pos_))) fail("position_ids is {}, expected int64", dtype_name(ctx.dtype(pos_)));
      if (p != Shape{b, s} && !(contrib_ && p == Shape{1}))
        fail("position_ids has shape {}, expected [{}, {}]{}", shape_str(p), b, s, contrib_ ? " or [1]" : "");
    }
    const bool ok = ids ? (c.size() == 2 && c[1] == hd.rot / 2) : (c == Shape{b, s, hd.rot / 2});
    if (!ok || ctx.shape(sin_) != c)
      fail("cos_cache {} and sin_cache {} must be {} with last dim rotary_embedding_dim / 2 = {}", shape_str(c),
           shape_str(ctx.shape(sin_)), ids ? "[max_position, R/2]" : fmt::format("[{}, {}, R/2]", b, s), hd.rot / 2);
    ctx.set_output(0, t, x);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(x_);
    const Shape& x = X.shape();
    const bool four = x.size() == 4;
    const Tensor& C = ctx.input(cos_);
    const Tensor& S = ctx.input(sin_);
    const Heads hd = heads(x, C.shape());
    const int64_t b = x[0], n = hd.n, s = four ? x[2] : x[1], h = hd.h;
    const int64_t rot = hd.rot, half = rot / 2;
    const Tensor* P = pos_ >= 0 && ctx.has_input(pos_) ? &ctx.input(pos_) : nullptr;
    const bool offset = P && P->rank() == 1;
    const int64_t max_pos = P ? C.dim(0) : 0;
    dispatch_float(X.dtype(), "RotaryEmbedding X", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const T* xp = X.data<T>();
      const T* cp = C.data<T>();
      const T* sp = S.data<T>();
      T* yp = ctx.output(0).data<T>();
      ctx.pool().parallel_for(b * n * s, std::max<int64_t>(1, 2048 / std::max<int64_t>(h, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          // r walks (b, n, s) for 4D, (b, s, n) for 3D: the memory order.
          int64_t bi, si;
          if (four) bi = r / (n * s), si = r % s;
          else bi = r / (s * n), si = (r / n) % s;
          int64_t row = bi * s + si;
          if (P) {
            const int64_t pos = offset ? tensor_int_at(*P, 0) + si : tensor_int_at(*P, bi * s + si);
            if (pos < 0 || pos >= max_pos)
              fail("position_ids gives position {} for [{}, {}], outside the cache's {} positions", pos, bi, si, max_pos);
            row = pos;
          }
          const T* xr = xp + r * h;
          T* yr = yp + r * h;
          const T* cr = cp + row * half;
          const T* sr = sp + row * half;
          if constexpr (std::is_same_v<T, Half>) {
            // float16: the row, cos and sin widened (vectorised, exact), the
            // same float operations, the row narrowed once.
            if (h <= kWideRow) {
              rotate_half_row(xr, cr, sr, yr, h, rot, half, interleaved_);
              continue;
            }
          }
          for (int64_t i = 0; i < half; ++i) {
            const int64_t a = interleaved_ ? 2 * i : i, c = interleaved_ ? 2 * i + 1 : i + half;
            const float x1 = static_cast<float>(A::load(xr[a])), x2 = static_cast<float>(A::load(xr[c]));
            const float co = static_cast<float>(A::load(cr[i])), si_ = static_cast<float>(A::load(sr[i]));
            yr[a] = A::store(static_cast<typename A::C>(co * x1 - si_ * x2));
            yr[c] = A::store(static_cast<typename A::C>(si_ * x1 + co * x2));
          }
          for (int64_t i = rot; i < h; ++i) yr[i] = xr[i];
        }
      });
    });
  }

 private:
  struct Heads {
    int64_t n = 0, h = 0, rot = 0;
  };
  // Heads, head size and rotary dims of input shape x given the cache shape c.
  Heads heads(const Shape& x, const Shape& c) const {
    Heads hd;
    if (x.size() == 4) {
      hd.n = x[1], hd.h = x[3];
    } else if (heads_ > 0) {
      hd.n = heads_, hd.h = x[2] / heads_;
    } else if (contrib_ && c.size() == 2 && c[1] > 0) {
      hd.h = 2 * c[1], hd.n = x[2] / hd.h;
    }
    hd.rot = rot_ ? rot_ : hd.h;
    return hd;
  }

  bool contrib_;
  int x_ = 0, cos_ = 1, sin_ = 2, pos_ = 3;
  int64_t heads_, rot_;
  bool interleaved_;
};

}  // namespace

void register_rotary_op(OpRegistry& r) {
  r.add(kOneBitDomain, "RotaryHalf", 1, 1, make_factory<RotaryHalfKernel>());
  r.add("", "RotaryEmbedding", 23, kOnnxOpsetMax, make_factory<RotaryEmbeddingKernel>());
  r.add(kMicrosoftDomain, "RotaryEmbedding", 1, 1, make_factory<RotaryEmbeddingKernel>());
}

}  // namespace onebit
