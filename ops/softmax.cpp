// Softmax, LogSoftmax and Hardmax along one axis (opset 13 semantics: the
// axis alone is normalised, not the flattened trailing block of opset < 13).
//
//   softmax(x)    = exp(x - max) / sum(exp(x - max))
//   logsoftmax(x) = x - max - log(sum(exp(x - max)))
//   hardmax(x)    = 1 at the first maximum, 0 elsewhere
//
// Subtracting the maximum keeps exp in (0, 1]. The input is viewed as
// [outer, n, inner]; inner = 1 (the last axis, every attention softmax) runs
// along contiguous rows, otherwise `inner` columns are handled together in
// chunks so the loops still run over contiguous memory. Both are threaded
// over rows. A float32 Softmax row is one microkernel (quant/ukernels'
// f32_vsoftmax, which leaves out a causal mask's negligible tail); other
// float32 rows use its vectorised exp; f16/bf16 compute in float with it
// too, f64 uses std::exp.
#include "ops/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/dispatch.h"
#include "quant/ukernels/kernel_config.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

// v[i] = e^v[i]: float through the one vectorised exp (quant/ukernels,
// exactly 0 for -inf, so masked scores vanish), double through std::exp.
template <class C>
void exp_inplace(C* v, int64_t n) {
  if constexpr (std::is_same_v<C, float>) vec_math_config().exp(static_cast<size_t>(n), v, v);
  else
    for (int64_t i = 0; i < n; ++i) v[i] = std::exp(v[i]);
}

// Elements a thread takes at least. An element costs an exp, a double add
// and a divide, several times an elementwise op's work: rows split over the
// threads sooner than kElementwiseGrain would (an attention softmax at 1024
// tokens of past, 16 heads: 16.6k elements, ~23 us on one thread).
constexpr int64_t kSoftmaxGrain = int64_t{1} << 13;

// Chunk of a row computed in C when T is narrower (float16, bfloat16).
constexpr int64_t kChunk = 256;

enum class Mode { Softmax, LogSoftmax, Hardmax };

// NaN counts as the maximum (first NaN wins), as numpy.argmax does.
template <class C>
bool beats(C v, C best) {
  if (best != best) return false;
  return v != v || v > best;
}

// One contiguous row of n elements.
template <class T>
void row_kernel(Mode mode, const T* x, T* y, int64_t n) {
  using A = Arith<T>;
  using C = typename A::C;
  if (mode == Mode::Hardmax) {
    int64_t at = 0;
    C best = A::load(x[0]);
    for (int64_t k = 1; k < n; ++k)
      if (beats(A::load(x[k]), best)) best = A::load(x[k]), at = k;
    for (int64_t k = 0; k < n; ++k) y[k] = A::store(C(k == at ? 1 : 0));
    return;
  }
  static_assert(kSoftmaxLanes == static_cast<int64_t>(kSoftmaxGroup), "softmax_prefix's groups are the kernel's");
  if constexpr (std::is_same_v<T, float>) {
    // A float32 Softmax row: the one row microkernel (f32_vexp_ukernels.h),
    // which leaves out a causal mask's negligible tail.
    if (mode == Mode::Softmax) return vec_math_config().softmax(static_cast<size_t>(n), x, y);
  }
  // The maximum; NaN is tracked apart and makes the max, and so the whole
  // row, NaN, as the formula gives.
  constexpr int L = static_cast<int>(kSoftmaxLanes);  // lanes of the max and of the sum below
  C m = -std::numeric_limits<C>::infinity();
  bool nan = false;
  int64_t k = 0;
  if constexpr (std::is_same_v<T, float>) {
    // Eight lanes (the baseline ISA's AVX): max as maxps, whose result for a
    // NaN element is the lane's running max; unordered compares flag NaN.
    __m256 lanes = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), nans = _mm256_setzero_ps();
    for (; k + L <= n; k += L) {
      const __m256 v = _mm256_loadu_ps(x + k);
      lanes = _mm256_max_ps(v, lanes);
      nans = _mm256_or_ps(nans, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    alignas(32) float l[L];
    _mm256_store_ps(l, lanes);
    for (int j = 0; j < L; ++j) m = l[j] > m ? l[j] : m;
    nan = _mm256_movemask_ps(nans) != 0;
  }
  for (; k < n; ++k) {
    const C v = A::load(x[k]);
    m = v > m ? v : m;
    nan |= v != v;
  }
  if (nan) m = std::numeric_limits<C>::quiet_NaN();

  // The sum of exponentials accumulates in double (float inputs): its
  // rounding would otherwise dominate log(sum) for rows with one dominant entry.
  using S = std::conditional_t<std::is_same_v<C, float>, double, C>;
  S sums[L] = {};
  S sum = 0;
  if constexpr (std::is_same_v<T, C>) {
    // Stash exp(x - m) in y, sum it, then normalise in place.
    for (k = 0; k < n; ++k) y[k] = x[k] - m;
    exp_inplace(y, n);
    for (k = 0; k + L <= n; k += L)
      for (int j = 0; j < L; ++j) sums[j] += static_cast<S>(y[k + j]);
    for (; k < n; ++k) sum += static_cast<S>(y[k]);
  } else {
    C e[kChunk];
    for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
      const int64_t len = std::min(kChunk, n - k0);
      for (int64_t j = 0; j < len; ++j) e[j] = A::load(x[k0 + j]) - m;
      exp_inplace(e, len);
      for (int64_t j = 0; j < len; ++j) sum += static_cast<S>(e[j]);
    }
  }
  for (int j = 0; j < L; ++j) sum += sums[j];

  if (mode == Mode::LogSoftmax) {
    // (x - m) - log(sum), not x - (m + log(sum)): the latter rounds log(sum)
    // to the precision of m and loses it for the largest entries.
    const C ls = static_cast<C>(std::log(sum));
    for (k = 0; k < n; ++k) y[k] = A::store((A::load(x[k]) - m) - ls);
  } else if constexpr (std::is_same_v<T, C>) {
    const C total = static_cast<C>(sum);
    for (k = 0; k < n; ++k) y[k] = y[k] / total;
  } else {
    const C total = static_cast<C>(sum);
    C e[kChunk];
    for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
      const int64_t len = std::min(kChunk, n - k0);
      for (int64_t j = 0; j < len; ++j) e[j] = A::load(x[k0 + j]) - m;
      exp_inplace(e, len);
      for (int64_t j = 0; j < len; ++j) y[k0 + j] = A::store(e[j] / total);
    }
  }
}

// `len` (<= kCols) neighbouring columns of an [n, inner] block, element (k, c)
// at x[k * inner + c].
constexpr int64_t kCols = 64;

template <class T>
void column_kernel(Mode mode, const T* x, T* y, int64_t n, int64_t inner, int64_t len) {
  using A = Arith<T>;
  using C = typename A::C;
  using S = std::conditional_t<std::is_same_v<C, float>, double, C>;  // as in row_kernel
  C m[kCols];
  S s[kCols];
  int64_t at[kCols];
  for (int64_t c = 0; c < len; ++c) m[c] = A::load(x[c]), at[c] = 0;
  for (int64_t k = 1; k < n; ++k)
    for (int64_t c = 0; c < len; ++c) {
      const C v = A::load(x[k * inner + c]);
      if (mode == Mode::Hardmax) {
        if (beats(v, m[c])) m[c] = v, at[c] = k;
      } else {
        m[c] = ((v > m[c]) | (v != v)) ? v : m[c];  // once NaN, stays NaN
      }
    }
  if (mode == Mode::Hardmax) {
    for (int64_t k = 0; k < n; ++k)
      for (int64_t c = 0; c < len; ++c) y[k * inner + c] = A::store(C(k == at[c] ? 1 : 0));
    return;
  }
  for (int64_t c = 0; c < len; ++c) s[c] = 0;
  C e[kCols];
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t c = 0; c < len; ++c) e[c] = A::load(x[k * inner + c]) - m[c];
    exp_inplace(e, len);
    for (int64_t c = 0; c < len; ++c) s[c] += e[c];
  }
  if (mode == Mode::LogSoftmax) {
    C ls[kCols];
    for (int64_t c = 0; c < len; ++c) ls[c] = static_cast<C>(std::log(s[c]));
    for (int64_t k = 0; k < n; ++k)
      for (int64_t c = 0; c < len; ++c) y[k * inner + c] = A::store((A::load(x[k * inner + c]) - m[c]) - ls[c]);
    return;
  }
  C total[kCols];
  for (int64_t c = 0; c < len; ++c) total[c] = static_cast<C>(s[c]);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t c = 0; c < len; ++c) e[c] = A::load(x[k * inner + c]) - m[c];
    exp_inplace(e, len);
    for (int64_t c = 0; c < len; ++c) y[k * inner + c] = A::store(e[c] / total[c]);
  }
}

class SoftmaxKernel : public Kernel {
 public:
  SoftmaxKernel(const KernelInfo& info, Mode mode) : mode_(mode), name_(info.op_type()) {
    axis_ = info.attrs().get_int("axis", -1);
  }

  void reshape(ReshapeContext& ctx) override {
    if (!dtype_is_float(ctx.dtype(0)))
      unsupported_dtype(fmt::format("{} input 0 (shape {})", name_, shape_str(ctx.shape(0))), ctx.dtype(0));
    if (ctx.rank(0) == 0) fail("input 0 is a scalar; {} needs at least one axis", name_);
    normalize_axis(axis_, ctx.rank(0), "attribute 'axis'");
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int axis = static_cast<int>(normalize_axis(axis_, X.rank(), "attribute 'axis'"));
    const int64_t outer = dims_product(X.shape(), 0, axis), n = X.dim(axis);
    const int64_t inner = dims_product(X.shape(), axis + 1, X.rank());
    if (outer * n * inner == 0) return;
    const Mode mode = mode_;
    dispatch_float(X.dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = X.data<T>();
      T* y = ctx.output(0).data<T>();
      if (inner == 1) {
        const int64_t grain = std::max<int64_t>(1, kSoftmaxGrain / n);
        ctx.pool().parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
          if constexpr (std::is_same_v<T, Half>) {
            // float16 rows widened (vectorised, exact), the float32 row
            // kernel, each output rounded once.
            const VecMathConfig& vm = vec_math_config();
            std::vector<float> row(static_cast<size_t>(2 * n));
            for (int64_t o = begin; o < end; ++o) {
              vm.widen(static_cast<size_t>(n), &x[o * n].bits, row.data());
              row_kernel(mode, row.data(), row.data() + n, n);
              vm.narrow(static_cast<size_t>(n), row.data() + n, &y[o * n].bits);
            }
          } else {
            for (int64_t o = begin; o < end; ++o) row_kernel(mode, x + o * n, y + o * n, n);
          }
        });
        return;
      }
      const int64_t chunks = (inner + kCols - 1) / kCols;
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (n * std::min(inner, kCols)));
      ctx.pool().parallel_for(outer * chunks, grain, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / chunks, c0 = (t % chunks) * kCols;
          const int64_t off = o * n * inner + c0;
          column_kernel(mode, x + off, y + off, n, inner, std::min(kCols, inner - c0));
        }
      });
    });
  }

 private:
  Mode mode_;
  std::string name_;
  int64_t axis_ = -1;
};

}  // namespace

// Mode::Softmax reads each x[k] before it writes y[k] (the maximum and the
// trailing run first, then x - m in place), so x may be y.
void softmax_row(const float* x, float* y, int64_t n) { row_kernel(Mode::Softmax, x, y, n); }

void register_softmax_ops(OpRegistry& r) {
  auto add = [&](const char* name, Mode mode) {
    r.add("", name, 13, kOnnxOpsetMax, [mode](const KernelInfo& i) { return std::make_unique<SoftmaxKernel>(i, mode); });
  };
  add("Softmax", Mode::Softmax);
  add("LogSoftmax", Mode::LogSoftmax);
  add("Hardmax", Mode::Hardmax);
}

}  // namespace onebit
