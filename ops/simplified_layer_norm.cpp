// The RMS norms onnxruntime's transformer optimizer and onnxruntime-genai's
// builder write (onnxruntime's contrib ops):
//
// SimplifiedLayerNormalization (registered by onnxruntime in the ai.onnx
// domain, version 1): X [..., D], scale [D]; attributes axis (−1), epsilon,
// stash_type (1: float32).
//   Y = X / sqrt(mean(X², axes axis…) + epsilon) · scale;  output 1 (optional)
//   inv_std_var = 1 / sqrt(mean(X²) + epsilon), shaped as X with 1 from axis on.
//
// com.microsoft::SkipSimplifiedLayerNormalization: input [..., D], skip
// (input's shape, or broadcast over leading dims), gamma [D], bias [D]
// (optional); attribute epsilon.
//   s = input + skip + bias;  output 0 = s / sqrt(mean(s²) + epsilon) · gamma,
//   output 1 mean (optional; 0: the RMS norm subtracts none), output 2
//   inv_std_var (optional), output 3 input_skip_bias_sum = s (optional) —
//   the residual stream the next layer adds to.
//
// com.microsoft::SkipLayerNormalization (what the builder writes for
// LayerNorm models: Phi-2, Nemotron, ...): input, skip, gamma, beta
// (optional), bias (optional); attribute epsilon. s as above; output 0 =
// (s − mean(s)) / sqrt(var(s) + epsilon) · gamma + beta, output 1 mean,
// output 2 inv_std_var, output 3 s (each optional). As onnxruntime's CPU
// kernel: the mean and E[s²] summed in double, var = E[s²] − mean², each
// output computed in double and rounded once.
//
// RMSNormalization (ai.onnx 23), what torch.onnx writes for RMSNorm at
// opset 23+: X [..., D...] (float16, bfloat16, float, double), scale
// broadcast to X's dims from axis on; attributes axis (−1), epsilon,
// stash_type (1: compute in float32; double stays double).
//   Y = X / sqrt(mean(X², axes axis…) + epsilon) · scale
//
// Sums accumulate in double, as onnxruntime's CPU kernels do for the skip
// variant; rows run in parallel.
#include <cmath>
#include <type_traits>
#include <vector>

#include "base/thread_pool.h"
#include "graph/op_registry.h"
#include "ops/dispatch.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

// X's dims from `axis` on (the normalized ones). Kernels derive what they
// need from the shapes they run on, never from state left by reshape: a
// session keeps several plans, and reshape last ran for whichever was
// built last.
Shape norm_tail(const Shape& x, int64_t axis_attr) {
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
  if (axis < 0 || axis >= rank) fail("attribute axis {} is outside X's rank {}", axis_attr, rank);
  return Shape(x.begin() + axis, x.end());
}

float inv_rms(const float* x, int64_t n, float eps) {
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
}

// float32, float16 or bfloat16 X (the weights of X's type): 16-bit rows are
// widened into a float32 row, computed as float32 rows are, and each output
// rounded once; the statistics outputs stay float32, as onnxruntime's are.
bool norm_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// n 16-bit floats to float32 and back (float16: the vectorised conversions).
template <class T> void widen(const T* src, int64_t n, float* dst) {
  if constexpr (std::is_same_v<T, Half>) vec_math_config().widen(static_cast<size_t>(n), &src->bits, dst);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = Arith<T>::load(src[i]);
}
template <class T> void narrow(const float* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<T, Half>) vec_math_config().narrow(static_cast<size_t>(n), src, &dst->bits);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = Arith<T>::store(src[i]);
}

class SimplifiedLayerNormKernel : public Kernel {
 public:
  explicit SimplifiedLayerNormKernel(const KernelInfo& info)
      : axis_(info.attrs().get_int("axis", -1)), epsilon_(info.attrs().get_float("epsilon", 1e-5f)) {
    const int64_t stash = info.attrs().get_int("stash_type", 1);
    if (stash != 1) fail("attribute stash_type is {}, expected 1 (float32)", stash);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!norm_dtype(t) || ctx.dtype(1) != t)
      fail("inputs X and scale are {} and {}, expected both float32, float16 or bfloat16", dtype_name(t),
           dtype_name(ctx.dtype(1)));
    const Shape& x = ctx.shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    const Shape tail = norm_tail(x, axis_);
    const int64_t axis = rank - static_cast<int64_t>(tail.size());
    if (numel(ctx.shape(1)) != numel(tail))
      fail("scale {} does not match X {} from axis {}", shape_str(ctx.shape(1)), shape_str(x), axis);
    ctx.set_output(0, t, x);
    if (ctx.has_output(1)) {
      Shape s = x;
      for (int64_t i = axis; i < rank; ++i) s[static_cast<size_t>(i)] = 1;
      ctx.set_output(1, DType::F32, s);
    }
  }

  void run(RunContext& ctx) override {
    dispatch_float(ctx.input(0).dtype(), "SimplifiedLayerNormalization X", [&](auto tag) {
      run_as<typename decltype(tag)::type>(ctx);
    });
  }

 private:
  template <class T> void run_as(RunContext& ctx) {
    using A = Arith<T>;
    const Tensor& X = ctx.input(0);
    const int64_t d = numel(norm_tail(X.shape(), axis_)), rows = d ? X.size() / d : 0;
    const T* x = X.data<T>();
    const T* w = ctx.input(1).data<T>();
    T* y = ctx.output(0).data<T>();
    float* inv_out = ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
    const float eps = epsilon_;
    ctx.pool().parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<float> wide(std::is_same_v<T, float> ? 0 : static_cast<size_t>(d));
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * d;
        T* yr = y + r * d;
        const float* xf;
        if constexpr (std::is_same_v<T, float>) {
          xf = xr;
        } else {
          widen(xr, d, wide.data());
          xf = wide.data();
        }
        const float inv = inv_rms(xf, d, eps);
        for (int64_t i = 0; i < d; ++i) yr[i] = A::store(xf[i] * inv * static_cast<float>(A::load(w[i])));
        if (inv_out) inv_out[r] = inv;
      }
    });
  }

  int64_t axis_;
  float epsilon_;
};

// SkipSimplifiedLayerNormalization, and SkipLayerNormalization (mean
// subtracted, beta added): inputs 0 input, 1 skip, 2 gamma, then beta
// (LayerNorm only) and bias.
class SkipLayerNormKernel : public Kernel {
 public:
  explicit SkipLayerNormKernel(const KernelInfo& info)
      : epsilon_(info.attrs().get_float("epsilon", 1e-5f)),
        simplified_(info.op_type() == "SkipSimplifiedLayerNormalization") {}

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!norm_dtype(t)) fail("input 0 is {}, expected float32, float16 or bfloat16", dtype_name(t));
    for (int i : {1, 2, 3, 4})
      if (ctx.has_input(i) && ctx.dtype(i) != t)
        fail("input {} is {}, input 0 is {}; they must agree", i, dtype_name(ctx.dtype(i)), dtype_name(t));
    const Shape& x = ctx.shape(0);
    if (x.size() < 2) fail("input has shape {}, expected [..., hidden]", shape_str(x));
    const int64_t d = x.back();
    const Shape& skip = ctx.shape(1);
    // skip: the input's shape, or its trailing dims (broadcast over the leading ones).
    if (skip.empty() || skip.size() > x.size() || !std::equal(skip.begin(), skip.end(), x.end() - static_cast<long>(skip.size())))
      fail("skip {} does not match input {} (equal, or its trailing dims)", shape_str(skip), shape_str(x));
    if (numel(ctx.shape(2)) != d) fail("gamma {} does not match the hidden size {}", shape_str(ctx.shape(2)), d);
    for (int i : {beta_at(), bias_at()})
      if (i >= 0 && ctx.has_input(i) && numel(ctx.shape(i)) != d)
        fail("{} {} does not match the hidden size {}", i == bias_at() ? "bias" : "beta", shape_str(ctx.shape(i)), d);
    ctx.set_output(0, t, x);
    Shape stat = x;
    stat.back() = 1;
    for (int o : {1, 2})
      if (ctx.has_output(o)) ctx.set_output(o, DType::F32, stat);
    if (ctx.has_output(3)) ctx.set_output(3, t, x);
  }

  void run(RunContext& ctx) override {
    dispatch_float(ctx.input(0).dtype(), "the skip norm's input", [&](auto tag) {
      run_as<typename decltype(tag)::type>(ctx);
    });
  }

 private:
  template <class T> void run_as(RunContext& ctx) {
    constexpr bool f32 = std::is_same_v<T, float>;
    const Tensor& X = ctx.input(0);
    const int64_t d = X.shape().back(), rows = d ? X.size() / d : 0;
    const T* x = X.data<T>();
    const T* sk = ctx.input(1).data<T>();
    const T* w = ctx.input(2).data<T>();
    const T* bias = ctx.has_input(bias_at()) ? ctx.input(bias_at()).data<T>() : nullptr;
    const T* beta = beta_at() >= 0 && ctx.has_input(beta_at()) ? ctx.input(beta_at()).data<T>() : nullptr;
    T* y = ctx.output(0).data<T>();
    float* mean_out = ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
    float* inv_out = ctx.has_output(2) ? ctx.output(2).data<float>() : nullptr;
    T* sum_out = ctx.has_output(3) ? ctx.output(3).data<T>() : nullptr;
    const float eps = epsilon_;
    const int64_t skip_rows = d > 0 ? ctx.input(1).size() / d : 0;
    ctx.pool().parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
      // 16-bit: s, the skip row, then the output in float32 rows; gamma,
      // bias and beta widened once per share.
      const size_t wd = f32 ? 0 : static_cast<size_t>(d);
      std::vector<float> wide(5 * wd);
      float *sw = wide.data(), *kw = sw + wd, *gw = kw + wd, *bw = gw + wd, *ew = bw + wd;
      if constexpr (!f32) {
        widen(w, d, gw);
        if (bias) widen(bias, d, bw);
        if (beta) widen(beta, d, ew);
      }
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * d;
        const T* sr = sk + (r % skip_rows) * d;
        T* yr = y + r * d;
        if constexpr (f32) {
          // s lands in output 3 when asked for, else in y (normalised in place).
          float* s = sum_out ? sum_out + r * d : y + r * d;
          for (int64_t i = 0; i < d; ++i) s[i] = xr[i] + sr[i] + (bias ? bias[i] : 0.0f);
          const Stats st = stats(s, d, eps);
          normalize(s, d, st, w, beta, yr);
          if (inv_out) inv_out[r] = st.inv;
          if (mean_out) mean_out[r] = static_cast<float>(st.mean);
        } else {
          widen(xr, d, sw);
          widen(sr, d, kw);
          for (int64_t i = 0; i < d; ++i) sw[i] = sw[i] + kw[i] + (bias ? bw[i] : 0.0f);
          const Stats st = stats(sw, d, eps);
          if (sum_out) narrow(sw, d, sum_out + r * d);
          normalize(sw, d, st, gw, beta ? ew : nullptr, kw);
          narrow(kw, d, yr);
          if (inv_out) inv_out[r] = st.inv;
          if (mean_out) mean_out[r] = static_cast<float>(st.mean);
        }
      }
    });
  }

  // A row's statistics: the RMS norm's 1 / rms (mean 0), or LayerNorm's
  // mean, standard deviation and 1 / sd.
  struct Stats {
    double mean = 0, sd = 1;
    float inv = 1;
  };
  Stats stats(const float* s, int64_t d, float eps) const {
    if (simplified_) return {0.0, 1.0, inv_rms(s, d, eps)};
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < d; ++i) {
      sum += s[i];
      sq += static_cast<double>(s[i]) * s[i];
    }
    Stats st;
    st.mean = sum / static_cast<double>(d);
    st.sd = std::sqrt(sq / static_cast<double>(d) - st.mean * st.mean + eps);
    st.inv = static_cast<float>(1.0 / st.sd);
    return st;
  }
  // y = s · inv · gamma (RMS), or (s − mean) / sd · gamma + beta in double
  // (LayerNorm; beta may be null); y may be s.
  void normalize(const float* s, int64_t d, const Stats& st, const float* gamma, const float* beta, float* y) const {
    if (simplified_) {
      for (int64_t i = 0; i < d; ++i) y[i] = s[i] * st.inv * gamma[i];
      return;
    }
    for (int64_t i = 0; i < d; ++i)
      y[i] = static_cast<float>((s[i] - st.mean) / st.sd * gamma[i] + (beta ? beta[i] : 0.0f));
  }
  int beta_at() const { return simplified_ ? -1 : 3; }
  int bias_at() const { return simplified_ ? 3 : 4; }

  float epsilon_;
  bool simplified_;
};

class RmsNormalizationKernel : public Kernel {
 public:
  explicit RmsNormalizationKernel(const KernelInfo& info)
      : axis_(info.attrs().get_int("axis", -1)), epsilon_(info.attrs().get_float("epsilon", 1e-5f)) {
    const int64_t stash = info.attrs().get_int("stash_type", 1);
    if (stash != 1) fail("attribute stash_type is {}, expected 1 (float32)", stash);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::F64)
      fail("input X is {}, expected a float type", dtype_name(t));
    if (ctx.dtype(1) != t) fail("input scale is {}, X is {}; they must agree", dtype_name(ctx.dtype(1)), dtype_name(t));
    const Shape& x = ctx.shape(0);
    const Shape tail = norm_tail(x, axis_);
    const int64_t axis = static_cast<int64_t>(x.size() - tail.size());
    const Shape& sc = ctx.shape(1);
    // scale broadcasts (right-aligned) to the normalized dims.
    if (sc.size() > tail.size()) fail("scale {} does not broadcast to X {} from axis {}", shape_str(sc), shape_str(x), axis);
    for (size_t i = 0; i < sc.size(); ++i)
      if (sc[i] != 1 && sc[i] != tail[tail.size() - sc.size() + i])
        fail("scale {} does not broadcast to X {} from axis {}", shape_str(sc), shape_str(x), axis);
    ctx.set_output(0, t, x);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const Tensor& S = ctx.input(1);
    const Shape tail = norm_tail(X.shape(), axis_);
    const int64_t d = numel(tail), rows = d ? X.size() / d : 0;
    // Each normalized element's scale index, broadcast.
    std::vector<int64_t> sidx(static_cast<size_t>(d));
    const Shape& sc = S.shape();
    for (int64_t i = 0; i < d; ++i) {
      int64_t rem = i, off = 0, stride = 1;
      for (size_t k = tail.size(); k-- > 0;) {
        const int64_t c = rem % tail[k];
        rem /= tail[k];
        const size_t from_end = tail.size() - 1 - k;
        if (from_end < sc.size()) {
          const int64_t sd = sc[sc.size() - 1 - from_end];
          if (sd != 1) off += c * stride;
          stride *= sd;
        }
      }
      sidx[static_cast<size_t>(i)] = off;
    }
    const float eps = epsilon_;
    dispatch_float(X.dtype(), "RMSNormalization X", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* x = X.data<T>();
      const T* w = S.data<T>();
      T* y = ctx.output(0).data<T>();
      ctx.pool().parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = x + r * d;
          double sq = 0;
          for (int64_t i = 0; i < d; ++i) {
            const double v = static_cast<double>(A::load(xr[i]));
            sq += v * v;
          }
          const C inv = static_cast<C>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
          for (int64_t i = 0; i < d; ++i)
            y[r * d + i] = A::store(static_cast<typename A::C>(static_cast<C>(A::load(xr[i])) * inv *
                                                               static_cast<C>(A::load(w[sidx[static_cast<size_t>(i)]]))));
        }
      });
    });
  }

 private:
  int64_t axis_;
  float epsilon_;
};

}  // namespace

void register_simplified_layer_norm_ops(OpRegistry& r) {
  r.add("", "SimplifiedLayerNormalization", 1, kOnnxOpsetMax, make_factory<SimplifiedLayerNormKernel>());
  r.add(kMicrosoftDomain, "SimplifiedLayerNormalization", 1, 1, make_factory<SimplifiedLayerNormKernel>());
  r.add(kMicrosoftDomain, "SkipSimplifiedLayerNormalization", 1, 1, make_factory<SkipLayerNormKernel>());
  r.add(kMicrosoftDomain, "SkipLayerNormalization", 1, 1, make_factory<SkipLayerNormKernel>());
  r.add("", "RMSNormalization", 23, kOnnxOpsetMax, make_factory<RmsNormalizationKernel>());
}

}  // namespace onebit
