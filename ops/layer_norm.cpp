// LayerNormalization (opset 17), GroupNormalization (18: scale/bias per
// group; 21: per channel, stash_type) and InstanceNormalization (6).
//
// All three normalise rows: LayerNormalization the block [axis, rank) of each
// leading index; GroupNormalization the C/G channels x spatial of each
// (n, group); InstanceNormalization the spatial block of each (n, c). Stage
// one (mean, variance, (x - mean) / sqrt(var + eps)) must be at least
// float32-precise (stash_type = 1); it runs in double, with two passes over
// the row (mean, then squared deviations) so large offsets do not cancel, and
// the Mean / InvStdDev outputs are rounded to float32. Stage two, Normalized * Scale + B, rounds
// Normalized to the input type first, as the LayerNormalization function
// body casts it back before the Mul.
#include <algorithm>
#include <cmath>

#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

// Mean and 1/sqrt(var + eps) of x[0..n) (population variance).
template <class T>
void row_stats(const T* x, int64_t n, double eps, double& mean, double& inv_std) {
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += static_cast<double>(Arith<T>::load(x[k]));
  const double m = sum / static_cast<double>(n);
  double sq = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double d = static_cast<double>(Arith<T>::load(x[k])) - m;
    sq += d * d;
  }
  const double var = sq / static_cast<double>(n);
  mean = m;
  inv_std = 1.0 / std::sqrt(var + eps);
}

// (x - mean) * inv_std, rounded to T (the function body's Cast back to T).
template <class T>
typename Arith<T>::C normalized(T x, double mean, double inv_std) {
  using A = Arith<T>;
  const double v = (static_cast<double>(A::load(x)) - mean) * inv_std;
  return A::load(A::store(static_cast<typename A::C>(v)));
}

// True when `s` (already known to broadcast to x) is 1 on every dim before
// `axis` and equal to x on every dim from `axis`: it then indexes like one
// normalised row, and Scale/B apply inside the row loop.
bool indexes_like_row(const Shape& s, const Shape& x, int axis) {
  const int r = static_cast<int>(x.size()), lead = r - static_cast<int>(s.size());
  for (int d = 0; d < r; ++d) {
    const int64_t v = d >= lead ? s[static_cast<size_t>(d - lead)] : 1;
    if (d < axis ? v != 1 : v != x[static_cast<size_t>(d)]) return false;
  }
  return true;
}

class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const KernelInfo& info) {
    axis_ = info.attrs().get_int("axis", -1);
    epsilon_ = info.attrs().get_float("epsilon", 1e-5f);
    const int64_t stash = info.attrs().get_int("stash_type", 1);
    if (stash != 1) fail("attribute 'stash_type' is {}, expected 1 (float32; the only stash type 1bit computes in)", stash);
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!dtype_is_float(t)) unsupported_dtype("LayerNormalization input X", t);
    const Shape& x = ctx.shape(0);
    const int axis = static_cast<int>(normalize_axis(axis_, ctx.rank(0), "attribute 'axis'"));
    for (int i : {1, 2}) {
      if (!ctx.has_input(i)) continue;
      const char* name = i == 1 ? "Scale" : "B";
      if (ctx.dtype(i) != t) fail("input {} is {}, X is {}", name, dtype_name(ctx.dtype(i)), dtype_name(t));
      const Shape& si = ctx.shape(i);
      bool ok = si.size() <= x.size();
      for (size_t d = 0; ok && d < si.size(); ++d) {
        const int64_t v = si[si.size() - 1 - d];
        ok = v == 1 || v == x[x.size() - 1 - d];
      }
      if (!ok) fail("input {} has shape {}, which does not broadcast to X's {}", name, shape_str(si), shape_str(x));
    }
    ctx.set_output(0, t, x);
    Shape stats = x;
    for (size_t d = static_cast<size_t>(axis); d < stats.size(); ++d) stats[d] = 1;
    ctx.set_output(1, DType::F32, stats);  // U = float32 for stash_type 1
    ctx.set_output(2, DType::F32, stats);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const Tensor& S = ctx.input(1);
    const Tensor* B = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& Y = ctx.output(0);
    const int axis = static_cast<int>(normalize_axis(axis_, X.rank(), "attribute 'axis'"));
    const int64_t rows = dims_product(X.shape(), 0, axis), n = dims_product(X.shape(), axis, X.rank());
    if (rows * n == 0) return;
    float* mean_out = ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
    float* inv_out = ctx.has_output(2) ? ctx.output(2).data<float>() : nullptr;
    // Scale and B that cover exactly one row can be applied inside the row loop.
    const bool fused =
        indexes_like_row(S.shape(), X.shape(), axis) && (!B || indexes_like_row(B->shape(), X.shape(), axis));
    const double eps = epsilon_;
    dispatch_float(X.dtype(), "LayerNormalization", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const T* x = X.data<T>();
      const T* s = S.data<T>();
      const T* b = B ? B->data<T>() : nullptr;
      T* y = Y.data<T>();
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / n);
      ctx.pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const T* xr = x + r * n;
          T* yr = y + r * n;
          double mean, inv;
          row_stats(xr, n, eps, mean, inv);
          if (mean_out) mean_out[r] = static_cast<float>(mean);
          if (inv_out) inv_out[r] = static_cast<float>(inv);
          if (fused) {
            for (int64_t k = 0; k < n; ++k) {
              auto v = normalized(xr[k], mean, inv) * A::load(s[k]);
              if (b) v += A::load(b[k]);
              yr[k] = A::store(v);
            }
          } else {
            for (int64_t k = 0; k < n; ++k) yr[k] = A::store(normalized(xr[k], mean, inv));
          }
        }
      });
      if (!fused) apply_affine<T>(ctx.pool(), Y, S, B);
    });
  }

 private:
  // Y = Y * S (+ B) in place, S and B broadcast to Y's shape.
  template <class T>
  static void apply_affine(ThreadPool& pool, Tensor& Y, const Tensor& S, const Tensor* B) {
    using A = Arith<T>;
    std::vector<Shape> shapes{Y.shape(), S.shape()};
    if (B) shapes.push_back(B->shape());
    const BroadcastPlan plan(shapes, Y.shape());
    T* y = Y.data<T>();
    const T* s = S.data<T>();
    const T* b = B ? B->data<T>() : nullptr;
    const int64_t inner = plan.inner(), ss = plan.inner_step(1), sb = B && plan.inner_step(2);
    pool.parallel_for(plan.outer(), std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t o = begin; o < end; ++o) {
                          T* py = y + o * inner;
                          const T* ps = s + plan.offset(1, o);
                          const T* pb = b ? b + plan.offset(2, o) : nullptr;
                          for (int64_t k = 0; k < inner; ++k) {
                            auto v = A::load(py[k]) * A::load(ps[k * ss]);
                            if (pb) v += A::load(pb[k * sb]);
                            py[k] = A::store(v);
                          }
                        }
                      });
  }

  int64_t axis_ = -1;
  float epsilon_ = 1e-5f;
};

// GroupNormalization and InstanceNormalization: X [N, C, spatial...]; rows
// are (n, group) with C/G channels each; scale/bias per channel, or per group
// (GroupNormalization-18).
class ChannelNormKernel : public Kernel {
 public:
  // groups_attr: read num_groups (GroupNormalization) or use G = C (Instance).
  ChannelNormKernel(const KernelInfo& info, bool group_norm, bool affine_per_group)
      : group_norm_(group_norm), per_group_(affine_per_group), name_(info.op_type()) {
    epsilon_ = info.attrs().get_float("epsilon", 1e-5f);
    if (group_norm_) {
      groups_ = info.attrs().get_int("num_groups");
      if (groups_ <= 0) fail("attribute 'num_groups' is {}, expected a positive number", groups_);
      const int64_t stash = info.attrs().get_int("stash_type", 1);
      if (stash != 1) fail("attribute 'stash_type' is {}, expected 1 (float32)", stash);
    }
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!dtype_is_float(t)) unsupported_dtype(fmt::format("{} input X", name_), t);
    const Shape& x = ctx.shape(0);
    if (x.size() < 2) fail("input X has shape {}; {} needs [N, C, ...]", shape_str(x), name_);
    const int64_t c = x[1];
    const int64_t g = group_norm_ ? groups_ : c;
    if (group_norm_ && c % g != 0)
      fail("attribute 'num_groups' is {}, which does not divide the {} channels of X {}", g, c, shape_str(x));
    const int64_t want = per_group_ ? g : c;
    for (int i : {1, 2}) {
      const char* name = i == 1 ? "scale" : "bias";
      if (ctx.dtype(i) != t) fail("input {} is {}, X is {}", name, dtype_name(ctx.dtype(i)), dtype_name(t));
      if (ctx.shape(i) != Shape{want})
        fail("input {} has shape {}, expected [{}] ({} of X {})", name, shape_str(ctx.shape(i)), want,
             per_group_ ? "num_groups" : "the channels", shape_str(x));
    }
    ctx.set_output(0, t, x);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int64_t n = X.dim(0), c = X.dim(1), spatial = dims_product(X.shape(), 2, X.rank());
    if (n * c * spatial == 0) return;  // before c / g: no channels means g = c = 0 (InstanceNormalization)
    const int64_t g = group_norm_ ? groups_ : c, cpg = c / g, len = cpg * spatial;
    const double eps = epsilon_;
    const bool per_group = per_group_;
    dispatch_float(X.dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const T* x = X.data<T>();
      const T* s = ctx.input(1).data<T>();
      const T* b = ctx.input(2).data<T>();
      T* y = ctx.output(0).data<T>();
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / len);
      ctx.pool().parallel_for(n * g, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t grp = r % g;
          const T* xr = x + r * len;
          T* yr = y + r * len;
          double mean, inv;
          row_stats(xr, len, eps, mean, inv);
          for (int64_t j = 0; j < cpg; ++j) {
            const int64_t ch = per_group ? grp : grp * cpg + j;
            const auto sc = A::load(s[ch]), bi = A::load(b[ch]);
            for (int64_t k = 0; k < spatial; ++k) {
              const int64_t at = j * spatial + k;
              yr[at] = A::store(normalized(xr[at], mean, inv) * sc + bi);
            }
          }
        }
      });
    });
  }

 private:
  bool group_norm_, per_group_;
  std::string name_;
  int64_t groups_ = 0;
  float epsilon_ = 1e-5f;
};

}  // namespace

void register_layer_norm_ops(OpRegistry& r) {
  r.add("", "LayerNormalization", 17, kOnnxOpsetMax, make_factory<LayerNormKernel>());
  // GroupNormalization-18 took scale and bias per group; 21 made them per
  // channel (and added stash_type). Different semantics, separate entries.
  r.add("", "GroupNormalization", 18, 20,
        [](const KernelInfo& i) { return std::make_unique<ChannelNormKernel>(i, true, true); });
  r.add("", "GroupNormalization", 21, kOnnxOpsetMax,
        [](const KernelInfo& i) { return std::make_unique<ChannelNormKernel>(i, true, false); });
  // InstanceNormalization-22 only adds bfloat16.
  r.add_versions("", "InstanceNormalization", {6, 22},
                 [](const KernelInfo& i) { return std::make_unique<ChannelNormKernel>(i, false, false); });
}

}  // namespace onebit
