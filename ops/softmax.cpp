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
// over rows. float32 uses exp_f32 below, which vectorises; f16/bf16 compute
// in float with it too, f64 uses std::exp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

// e^x for float, written so the compiler can vectorise it: x = n ln2 + r
// with |r| <= ln2/2 (Cody-Waite, ln2 split in two), e^r by its degree-7
// Taylor polynomial (truncation error < 6e-9 relative), times 2^n built in
// the exponent bits. Within 1e-7 relative of exp for x in [-87.3, 88.7]
// (FLT_MIN to FLT_MAX); below about -87.7 the result is 0 (the float32
// denormals are flushed), above 88.72 it is +inf; NaN stays NaN.
//
// Every step is straight-line arithmetic or an integer select: a float
// select with a constant arm (a clamp of x, say) lets GCC split the loop into
// paths, which it will not merge back under -ftrapping-math, and the loop
// then stays scalar (5x slower).
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 10 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  // |x| clamped to 104 on the bit pattern (keeps the sign; e^±104 is already
  // 0 / inf in float32). NaN is remembered and restored at the end.
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t mag = bits & 0x7FFFFFFFu;
  const uint32_t nan = mag > 0x7F800000u ? 0x7FC00000u : 0u;
  const float xc = std::bit_cast<float>(std::min(mag, 0x42D00000u) | (bits & 0x80000000u));
  const float n = std::nearbyint(xc * kLog2e);  // in [-150, 150]
  float r = std::fma(-n, kLn2Hi, xc);
  r = std::fma(-n, kLn2Lo, r);
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // 2^n as 2^a * 2^b with a in [-126, 127] (always normal); 2^b is exactly 0
  // when n < -126, so tiny results are 0 without passing through denormals,
  // and overflows to inf when n > 128.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t a = std::min(std::max(ni, -126), 127);
  const int32_t b = ni < -126 ? 0 : std::min(ni - a + 127, 255);
  const float y = (p * std::bit_cast<float>(b << 23)) * std::bit_cast<float>((a + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(y) | nan);
}

template <class C>
C exp_of(C v) {
  if constexpr (std::is_same_v<C, float>) return exp_f32(v);
  else return std::exp(v);
}

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
  // Max with independent lanes so it vectorises; NaN is tracked apart (a
  // select that also tests for NaN keeps the loop scalar) and makes the max,
  // and so the whole row, NaN, as the formula gives.
  constexpr int L = 8;
  C lanes[L];
  int nan_lanes[L] = {};
  for (int j = 0; j < L; ++j) lanes[j] = -std::numeric_limits<C>::infinity();
  int64_t k = 0;
  for (; k + L <= n; k += L)
    for (int j = 0; j < L; ++j) {
      const C v = A::load(x[k + j]);
      lanes[j] = v > lanes[j] ? v : lanes[j];
      nan_lanes[j] |= v != v;
    }
  C m = -std::numeric_limits<C>::infinity();
  bool nan = false;
  for (; k < n; ++k) {
    const C v = A::load(x[k]);
    m = v > m ? v : m;
    nan |= v != v;
  }
  for (int j = 0; j < L; ++j) {
    m = lanes[j] > m ? lanes[j] : m;
    nan |= nan_lanes[j] != 0;
  }
  if (nan) m = std::numeric_limits<C>::quiet_NaN();

  // The sum of exponentials accumulates in double (float inputs): its
  // rounding would otherwise dominate log(sum) for rows with one dominant entry.
  using S = std::conditional_t<std::is_same_v<C, float>, double, C>;
  S sums[L] = {};
  S sum = 0;
  if constexpr (std::is_same_v<T, C>) {
    // Stash exp(x - m) in y (a plain loop, so it vectorises), sum it, then
    // normalise in place.
    for (k = 0; k < n; ++k) y[k] = exp_of(x[k] - m);
    for (k = 0; k + L <= n; k += L)
      for (int j = 0; j < L; ++j) sums[j] += static_cast<S>(y[k + j]);
    for (; k < n; ++k) sum += static_cast<S>(y[k]);
  } else {
    for (k = 0; k < n; ++k) sum += static_cast<S>(exp_of(A::load(x[k]) - m));
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
    for (k = 0; k < n; ++k) y[k] = A::store(exp_of(A::load(x[k]) - m) / total);
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
  for (int64_t k = 0; k < n; ++k)
    for (int64_t c = 0; c < len; ++c) s[c] += exp_of(A::load(x[k * inner + c]) - m[c]);
  if (mode == Mode::LogSoftmax) {
    C ls[kCols];
    for (int64_t c = 0; c < len; ++c) ls[c] = static_cast<C>(std::log(s[c]));
    for (int64_t k = 0; k < n; ++k)
      for (int64_t c = 0; c < len; ++c) y[k * inner + c] = A::store((A::load(x[k * inner + c]) - m[c]) - ls[c]);
    return;
  }
  C total[kCols];
  for (int64_t c = 0; c < len; ++c) total[c] = static_cast<C>(s[c]);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t c = 0; c < len; ++c) y[k * inner + c] = A::store(exp_of(A::load(x[k * inner + c]) - m[c]) / total[c]);
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
        const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / n);
        ctx.pool().parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) row_kernel(mode, x + o * n, y + o * n, n);
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

void register_softmax_ops(OpRegistry& r) {
  auto add = [&](const char* name, Mode mode) {
    r.add("", name, 13, 21, [mode](const KernelInfo& i) { return std::make_unique<SoftmaxKernel>(i, mode); });
  };
  add("Softmax", Mode::Softmax);
  add("LogSoftmax", Mode::LogSoftmax);
  add("Hardmax", Mode::Hardmax);
}

}  // namespace onebit
