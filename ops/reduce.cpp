// Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, and
// ArgMax / ArgMin.
//
// `axes` is an attribute before opset 18 (13 for ReduceSum) and an optional
// input after. With no axes (or an empty list) every axis is reduced, unless
// noop_with_empty_axes = 1, in which case nothing is reduced but the
// elementwise part still applies (ReduceSumSquare squares, ReduceLogSum logs).
// An empty reduction gives the op's identity: 0 for sums, 1 for the product,
// -inf / the type's minimum for max, +inf / maximum for min, log(0) = -inf
// for the log reductions, and NaN (0/0) for the float mean.
//
// The input is viewed as alternating runs of kept and reduced dims (size-1
// dims dropped, neighbours of one kind merged). Two loops cover it: when the
// innermost run is reduced, each output reduces contiguous rows (the RMSNorm
// ReduceMean(axis=-1) case, threaded over rows, split into independent
// accumulators so it vectorises); when the innermost run is kept, whole
// contiguous rows are accumulated into a row of outputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/int_arith.h"
#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

enum class Red { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

// Integers sum and multiply with two's complement wrap-around (ops/int_arith.h;
// the result is then narrowed to the input type, which is what summing in that
// type gives).

// A reducer over compute type C for storage type T:
//   Acc init();  add(Acc&, C);  merge(Acc&, const Acc&);  C finish(Acc, count)
// kLanes independent accumulators are used along contiguous rows.
template <class T, class C>
struct SumR {
  using Acc = C;
  static constexpr int kLanes = 16;
  static Acc init() { return C(0); }
  static void add(Acc& a, C x) { a = wrap_add(a, x); }
  static void merge(Acc& a, const Acc& b) { a = wrap_add(a, b); }
  static C finish(Acc a, int64_t) { return a; }
};
template <class T, class C>
struct MeanR : SumR<T, C> {
  static C finish(C a, int64_t n) {
    if constexpr (std::is_integral_v<C>) return n == 0 ? C(0) : static_cast<C>(a / static_cast<C>(n));
    else return a / static_cast<C>(n);
  }
};
template <class T, class C>
struct SumSquareR : SumR<T, C> {
  static void add(C& a, C x) { a = wrap_add(a, wrap_mul(x, x)); }
};
template <class T, class C>
struct L1R : SumR<T, C> {
  static void add(C& a, C x) {
    if constexpr (std::is_unsigned_v<C>) a = wrap_add(a, x);
    else a = wrap_add(a, x < C(0) ? wrap_mul(x, C(-1)) : x);
  }
};
template <class T, class C>
struct L2R : SumSquareR<T, C> {
  static C finish(C a, int64_t) { return std::sqrt(a); }
};
template <class T, class C>
struct LogSumR : SumR<T, C> {
  static C finish(C a, int64_t) { return std::log(a); }
};
template <class T, class C>
struct ProdR {
  using Acc = C;
  static constexpr int kLanes = 8;
  static Acc init() { return C(1); }
  static void add(Acc& a, C x) { a = wrap_mul(a, x); }
  static void merge(Acc& a, const Acc& b) { a = wrap_mul(a, b); }
  static C finish(Acc a, int64_t) { return a; }
};
// Max and min propagate NaN (as numpy.max); the empty identity is the type's
// extreme (bool: false for max, true for min).
template <class T, class C>
struct MaxR {
  using Acc = C;
  static constexpr int kLanes = 8;
  static Acc init() {
    if constexpr (std::numeric_limits<C>::has_infinity) return -std::numeric_limits<C>::infinity();
    else return static_cast<C>(std::numeric_limits<T>::lowest());
  }
  static void add(Acc& a, C x) { a = (x > a || x != x) ? x : a; }
  static void merge(Acc& a, const Acc& b) { add(a, b); }
  static C finish(Acc a, int64_t) { return a; }
};
template <class T, class C, bool kBool = false>
struct MinR {
  using Acc = C;
  static constexpr int kLanes = 8;
  static Acc init() {
    if constexpr (kBool) return C(1);
    else if constexpr (std::numeric_limits<C>::has_infinity) return std::numeric_limits<C>::infinity();
    else return static_cast<C>(std::numeric_limits<T>::max());
  }
  static void add(Acc& a, C x) { a = (x < a || x != x) ? x : a; }
  static void merge(Acc& a, const Acc& b) { add(a, b); }
  static C finish(Acc a, int64_t) { return a; }
};
// log(sum(exp(x))) in one pass, rescaling the running sum whenever the
// maximum grows, so large inputs do not overflow.
template <class T, class C>
struct LogSumExpR {
  struct Acc {
    C m, s;
  };
  static constexpr int kLanes = 1;
  static Acc init() { return {-std::numeric_limits<C>::infinity(), C(0)}; }
  static void add(Acc& a, C x) {
    if (x == -std::numeric_limits<C>::infinity()) return;  // contributes exp(-inf) = 0
    if (x > a.m) {
      a.s = a.s * std::exp(a.m - x) + C(1);
      a.m = x;
    } else if (x == a.m) {
      a.s += C(1);
    } else {
      a.s += std::exp(x - a.m);  // NaN x lands here and poisons the sum
    }
  }
  static void merge(Acc& a, const Acc& b) { (void)a, (void)b; }  // kLanes = 1: never called
  static C finish(const Acc& a, int64_t) {
    if (std::isinf(a.m)) return a.m;
    return a.m + std::log(a.s);
  }
};

// Storage <- compute type. Float results of integer inputs (L2, the logs)
// truncate toward zero like a C cast; values an int64 cannot hold give the
// type's minimum instead of undefined behaviour.
template <class T, class C>
T store(C v) {
  if constexpr (!std::is_integral_v<T>) {
    return Arith<T>::store(static_cast<typename Arith<T>::C>(v));
  } else if constexpr (std::is_floating_point_v<C>) {
    return float_to_int<T>(static_cast<double>(v));  // as Cast converts
  } else {
    return static_cast<T>(v);
  }
}

// The input as runs of kept / reduced dims; size-1 dims dropped.
struct ReduceLayout {
  int m = 0;
  int64_t size[kMaxRank];
  bool reduced[kMaxRank];
  int64_t stride[kMaxRank];
  int64_t out_count = 1, red_count = 1;
};

ReduceLayout make_layout(const Shape& shape, uint32_t mask) {
  ReduceLayout l;
  const int rank = static_cast<int>(shape.size());
  for (int d = 0; d < rank; ++d) {
    const bool red = (mask >> d) & 1u;
    const int64_t s = shape[static_cast<size_t>(d)];
    (red ? l.red_count : l.out_count) *= s;
    if (s == 1) continue;
    if (l.m > 0 && l.reduced[l.m - 1] == red) {
      l.size[l.m - 1] *= s;
    } else {
      l.size[l.m] = s;
      l.reduced[l.m] = red;
      ++l.m;
    }
  }
  int64_t st = 1;
  for (int i = l.m; i-- > 0;) {
    l.stride[i] = st;
    st *= l.size[i];
  }
  return l;
}

// Dims of one kind (kept or reduced), innermost excluded when asked: linear
// index -> element offset.
struct DimWalk {
  int n = 0;
  int64_t size[kMaxRank];
  int64_t stride[kMaxRank];
  int64_t count = 1;
  int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = n; d-- > 0;) {
      const int64_t q = i / size[d];
      off += (i - q * size[d]) * stride[d];
      i = q;
    }
    return off;
  }
};

DimWalk walk_of(const ReduceLayout& l, bool reduced, bool skip_last) {
  DimWalk w;
  const int end = skip_last ? l.m - 1 : l.m;
  for (int i = 0; i < end; ++i)
    if (l.reduced[i] == reduced) {
      w.size[w.n] = l.size[i];
      w.stride[w.n] = l.stride[i];
      w.count *= l.size[i];
      ++w.n;
    }
  return w;
}

// Reduces x[0..n) (contiguous) into `a` with R::kLanes independent
// accumulators, so the compiler can keep them in vector registers.
template <class R, class T, class C>
void add_row(typename R::Acc& a, const T* x, int64_t n) {
  constexpr int L = R::kLanes;
  int64_t i = 0;
  if constexpr (L > 1) {
    if (n >= 2 * L) {
      typename R::Acc lanes[L];
      for (int j = 0; j < L; ++j) lanes[j] = R::init();
      for (; i + L <= n; i += L)
        for (int j = 0; j < L; ++j) R::add(lanes[j], static_cast<C>(Arith<T>::load(x[i + j])));
      for (int j = 0; j < L; ++j) R::merge(a, lanes[j]);
    }
  }
  for (; i < n; ++i) R::add(a, static_cast<C>(Arith<T>::load(x[i])));
}

template <class R, class T, class C>
void reduce_tensor(ThreadPool& pool, const Tensor& X, Tensor& Y, uint32_t mask) {
  const T* x = X.data<T>();
  T* y = Y.data<T>();
  const ReduceLayout l = make_layout(X.shape(), mask);
  const int64_t outs = l.out_count, count = l.red_count;
  if (outs == 0) return;
  using Acc = typename R::Acc;
  if (count == 0) {  // every output reduces an empty set
    const T v = store<T>(R::finish(R::init(), 0));
    for (int64_t o = 0; o < outs; ++o) y[o] = v;
    return;
  }
  const bool any_reduced = std::any_of(l.reduced, l.reduced + l.m, [](bool r) { return r; });
  if (!any_reduced) {  // nothing reduced: only the elementwise part
    map_elements(pool, x, y, outs, [](T v) {
      Acc a = R::init();
      R::add(a, static_cast<C>(Arith<T>::load(v)));
      return store<T>(R::finish(a, 1));
    });
    return;
  }
  if (l.reduced[l.m - 1]) {
    // Innermost run reduced: each output reduces rows of `row` contiguous elements.
    const int64_t row = l.size[l.m - 1];
    const DimWalk kept = walk_of(l, false, true), red = walk_of(l, true, true);
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (row * red.count));
    pool.parallel_for(outs, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* base = x + kept.offset(o);
        Acc a = R::init();
        for (int64_t r = 0; r < red.count; ++r) add_row<R, T, C>(a, base + red.offset(r), row);
        y[o] = store<T>(R::finish(a, count));
      }
    });
    return;
  }
  // Innermost run kept: accumulate rows of `row` outputs, a chunk at a time.
  const int64_t row = l.size[l.m - 1];
  const DimWalk kept = walk_of(l, false, true), red = walk_of(l, true, false);
  constexpr int64_t kChunk = 256;
  const int64_t rows = outs / row;
  const int64_t chunks = (row + kChunk - 1) / kChunk;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / (std::min(row, kChunk) * count));
  pool.parallel_for(rows * chunks, grain, [&](int64_t begin, int64_t end) {
    Acc acc[kChunk];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / chunks, k0 = (t % chunks) * kChunk;
      const int64_t len = std::min(kChunk, row - k0);
      const T* base = x + kept.offset(o) + k0;
      for (int64_t k = 0; k < len; ++k) acc[k] = R::init();
      for (int64_t r = 0; r < red.count; ++r) {
        const T* p = base + red.offset(r);
        for (int64_t k = 0; k < len; ++k) R::add(acc[k], static_cast<C>(Arith<T>::load(p[k])));
      }
      T* py = y + o * row + k0;
      for (int64_t k = 0; k < len; ++k) py[k] = store<T>(R::finish(acc[k], count));
    }
  });
}

// Compute type: the float arithmetic type for floats; for integers a 64-bit
// integer of the same signedness, or double for the reductions whose result
// is a real function (L2, LogSum, LogSumExp).
template <class T, bool kReal>
using CalcOf = std::conditional_t<is_float_v<T>, typename Arith<T>::C,
                                  std::conditional_t<kReal, double,
                                                     std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>>;

bool is_axes_input_form(const std::string& op, int64_t opset) {
  return op == "ReduceSum" ? opset >= 13 : opset >= 18;
}

class ReduceKernel : public Kernel {
 public:
  ReduceKernel(const KernelInfo& info, Red op) : op_(op), name_(info.op_type()) {
    keepdims_ = info.attrs().get_int("keepdims", 1) != 0;
    noop_ = info.attrs().get_int("noop_with_empty_axes", 0) != 0;
    axes_input_ = is_axes_input_form(name_, info.opset());
    if (axes_input_ && info.attrs().has("axes"))
      fail("attribute 'axes' is not part of {} at opset {}; axes are input 1", name_, info.opset());
    if (!axes_input_) attr_axes_ = info.attrs().get_ints("axes", {});
    // Axes given as values a step might change would move the output's dims.
    follows_growth_ = !axes_input_ || !info.has_input(1) || info.constant(1) != nullptr;
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    check_input(t, ctx.shape(0));
    const Shape& in = ctx.shape(0);
    const Tensor* axes = nullptr;
    if (axes_input_ && ctx.has_input(1)) axes = &ctx.value(1);
    const uint32_t mask = reduced_mask(ctx.rank(0), axes);
    Shape out;
    for_each_output_dim(in, mask, [&](int64_t dim) { out.push_back(dim); });
    ctx.set_output(0, t, std::move(out));
  }

  // Its output's dims are the input's, the reduced ones dropped or 1 (axes
  // that are an attribute or a constant): a plan may grow it; run() checks
  // what reshape() does.
  bool follows_growth() const override { return follows_growth_; }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    check_input(X.dtype(), X.shape());
    const Tensor* axes = axes_input_ && ctx.has_input(1) ? &ctx.input(1) : nullptr;
    const uint32_t mask = reduced_mask(X.rank(), axes);
    Tensor& Y = ctx.output(0);
    {
      // Bound to the shape reshape() gives (Kernel::follows_growth).
      bool same = Y.dtype() == X.dtype();
      int o = 0;
      for_each_output_dim(X.shape(), mask, [&](int64_t dim) {
        same = same && o < Y.rank() && Y.dim(o) == dim;
        ++o;
      });
      if (!same || o != Y.rank())
        fail("bound to an output of {} {} for input {} {}", dtype_name(Y.dtype()), shape_str(Y.shape()),
             dtype_name(X.dtype()), shape_str(X.shape()));
    }
    ThreadPool& pool = ctx.pool();
    if (X.dtype() == DType::Bool) {  // ReduceMax = any, ReduceMin = all (False < True)
      const Tensor xb(DType::U8, X.shape(), X.raw());
      Tensor yb(DType::U8, Y.shape(), Y.raw());
      if (op_ == Red::Max) reduce_tensor<MaxR<uint8_t, uint8_t>, uint8_t, uint8_t>(pool, xb, yb, mask);
      else reduce_tensor<MinR<uint8_t, uint8_t, true>, uint8_t, uint8_t>(pool, xb, yb, mask);
      return;
    }
    dispatch_numeric(X.dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = CalcOf<T, false>;
      using D = CalcOf<T, true>;
      switch (op_) {
        case Red::Sum: return reduce_tensor<SumR<T, C>, T, C>(pool, X, Y, mask);
        case Red::Mean: return reduce_tensor<MeanR<T, C>, T, C>(pool, X, Y, mask);
        case Red::Max: return reduce_tensor<MaxR<T, C>, T, C>(pool, X, Y, mask);
        case Red::Min: return reduce_tensor<MinR<T, C>, T, C>(pool, X, Y, mask);
        case Red::Prod: return reduce_tensor<ProdR<T, C>, T, C>(pool, X, Y, mask);
        case Red::L1: return reduce_tensor<L1R<T, C>, T, C>(pool, X, Y, mask);
        case Red::SumSquare: return reduce_tensor<SumSquareR<T, C>, T, C>(pool, X, Y, mask);
        case Red::L2: return reduce_tensor<L2R<T, D>, T, D>(pool, X, Y, mask);
        case Red::LogSum: return reduce_tensor<LogSumR<T, D>, T, D>(pool, X, Y, mask);
        case Red::LogSumExp: return reduce_tensor<LogSumExpR<T, D>, T, D>(pool, X, Y, mask);
      }
    });
  }

 private:
  void check_input(DType t, const Shape& in) const {
    const bool boolean_ok = op_ == Red::Max || op_ == Red::Min;
    if (!(dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8) || (boolean_ok && t == DType::Bool)))
      unsupported_dtype(fmt::format("{} input 0 (shape {})", name_, shape_str(in)), t);
    check_max_rank(static_cast<int>(in.size()), name_);
  }

  // fn(dim) for each output dim in order: the input's, a reduced one
  // dropped or 1 (keepdims). reshape() builds the output from it, run()
  // checks its binding against it.
  template <class Fn>
  void for_each_output_dim(const Shape& in, uint32_t mask, Fn&& fn) const {
    for (size_t d = 0; d < in.size(); ++d) {
      if (!((mask >> d) & 1u)) fn(in[d]);
      else if (keepdims_) fn(int64_t{1});
    }
  }

  // Bit d set when axis d is reduced. Recomputed in run() from the same
  // inputs, since a cached plan may skip reshape().
  uint32_t reduced_mask(int rank, const Tensor* axes_input) const {
    const int64_t n = axes_input ? axes_input->size() : static_cast<int64_t>(attr_axes_.size());
    if (n == 0) return noop_ ? 0u : (rank >= 32 ? ~0u : (1u << rank) - 1u);
    uint32_t mask = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = axes_input ? tensor_int_at(*axes_input, i) : attr_axes_[static_cast<size_t>(i)];
      const int64_t d = normalize_axis(a, rank, "axes entry");
      if ((mask >> d) & 1u) fail("axes lists axis {} twice (as {})", d, a);
      mask |= 1u << d;
    }
    return mask;
  }

  Red op_;
  std::string name_;
  bool keepdims_ = true, noop_ = false, axes_input_ = false, follows_growth_ = true;
  std::vector<int64_t> attr_axes_;
};

// ArgMax / ArgMin (opset 13): the first index of the extreme along `axis`,
// or the last with select_last_index. NaN counts as the extreme (numpy.argmax).
class ArgKernel : public Kernel {
 public:
  ArgKernel(const KernelInfo& info, bool max) : max_(max), name_(info.op_type()) {
    axis_ = info.attrs().get_int("axis", 0);
    keepdims_ = info.attrs().get_int("keepdims", 1) != 0;
    last_ = info.attrs().get_int("select_last_index", 0) != 0;
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!(dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8)))
      unsupported_dtype(fmt::format("{} input 0", name_), t);
    const Shape& in = ctx.shape(0);
    const int axis = static_cast<int>(normalize_axis(axis_, ctx.rank(0), "attribute 'axis'"));
    if (in[static_cast<size_t>(axis)] == 0 && numel(out_shape(in, axis)) > 0)
      fail("input 0 has shape {}: {} over an empty axis {} has no answer", shape_str(in), name_, axis);
    ctx.set_output(0, DType::I64, out_shape(in, axis));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int axis = static_cast<int>(normalize_axis(axis_, X.rank(), "attribute 'axis'"));
    const int64_t outer = dims_product(X.shape(), 0, axis), r = X.dim(axis);
    const int64_t inner = dims_product(X.shape(), axis + 1, X.rank());
    int64_t* y = ctx.output(0).data<int64_t>();
    const bool max = max_, last = last_;
    dispatch_numeric(X.dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const T* x = X.data<T>();
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(r, 1));
      ctx.pool().parallel_for(outer * inner, grain, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / inner, i = t % inner;
          const T* p = x + o * r * inner + i;
          auto best = A::load(p[0]);
          int64_t at = 0;
          for (int64_t k = 1; k < r; ++k) {
            const auto v = A::load(p[k * inner]);
            const bool v_nan = v != v, b_nan = best != best;
            bool take;
            if (b_nan) take = last && v_nan;
            else if (v_nan) take = true;
            else take = (max ? v > best : v < best) || (last && v == best);
            if (take) {
              best = v;
              at = k;
            }
          }
          y[t] = at;
        }
      });
    });
  }

 private:
  Shape out_shape(const Shape& in, int axis) const {
    Shape out;
    for (size_t d = 0; d < in.size(); ++d) {
      if (static_cast<int>(d) != axis) out.push_back(in[d]);
      else if (keepdims_) out.push_back(1);
    }
    return out;
  }

  bool max_;
  std::string name_;
  int64_t axis_ = 0;
  bool keepdims_ = true, last_ = false;
};

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  auto add = [&](const char* name, int64_t since, int64_t until, Red op) {
    r.add("", name, since, until, [op](const KernelInfo& i) { return std::make_unique<ReduceKernel>(i, op); });
  };
  // ReduceSum took `axes` as an input at 13, the others at 18; Max/Min added bool at 20.
  add("ReduceSum", 13, kOnnxOpsetMax, Red::Sum);
  struct Entry {
    const char* name;
    Red op;
  };
  for (const Entry& e : {Entry{"ReduceMean", Red::Mean}, Entry{"ReduceProd", Red::Prod}, Entry{"ReduceL1", Red::L1},
                         Entry{"ReduceL2", Red::L2}, Entry{"ReduceLogSum", Red::LogSum},
                         Entry{"ReduceLogSumExp", Red::LogSumExp}, Entry{"ReduceSumSquare", Red::SumSquare}}) {
    add(e.name, 13, 17, e.op);
    add(e.name, 18, kOnnxOpsetMax, e.op);
  }
  for (const Entry& e : {Entry{"ReduceMax", Red::Max}, Entry{"ReduceMin", Red::Min}}) {
    add(e.name, 13, 17, e.op);
    add(e.name, 18, 19, e.op);
    add(e.name, 20, kOnnxOpsetMax, e.op);
  }
  r.add("", "ArgMax", 13, kOnnxOpsetMax, [](const KernelInfo& i) { return std::make_unique<ArgKernel>(i, true); });
  r.add("", "ArgMin", 13, kOnnxOpsetMax, [](const KernelInfo& i) { return std::make_unique<ArgKernel>(i, false); });
}

}  // namespace onebit
