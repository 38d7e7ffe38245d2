// TopK (opset 11): the k largest (or smallest) elements along an axis and
// their indices. Equal values keep index order (the lower index first); NaN
// ranks above every number, so it leads the largest and trails the smallest
// (the reference's lexsort order). `sorted = 0` leaves the order undefined;
// the results come sorted anyway.
//
// Each slice is ranked through an index buffer in the workspace
// (std::partial_sort, O(n log k)); slices run one after another, which suits
// the common case of one long row (a vocabulary's logits).
#include <algorithm>
#include <cmath>

#include "ops/dispatch.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

class TopKKernel : public Kernel {
 public:
  explicit TopKKernel(const KernelInfo& info) {
    axis_ = info.attrs().get_int("axis", -1);
    largest_ = info.attrs().get_int("largest", 1) != 0;
    (void)info.attrs().get_int("sorted", 1);  // results are always sorted
  }

  void reshape(ReshapeContext& ctx) override {
    const DType t = ctx.dtype(0);
    if (!(dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8))) unsupported_dtype("TopK input X", t);
    const Shape& x = ctx.shape(0);
    const int axis = static_cast<int>(normalize_axis(axis_, ctx.rank(0), "attribute 'axis'"));
    const int64_t k = k_of(ctx.value(1), x[static_cast<size_t>(axis)]);
    Shape out = x;
    out[static_cast<size_t>(axis)] = k;
    ctx.set_output(0, t, out);
    ctx.set_output(1, DType::I64, out);
    ctx.set_workspace(static_cast<size_t>(x[static_cast<size_t>(axis)]) * sizeof(int64_t));
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const int axis = static_cast<int>(normalize_axis(axis_, X.rank(), "attribute 'axis'"));
    const int64_t n = X.dim(axis), k = k_of(ctx.input(1), n);
    const int64_t outer = dims_product(X.shape(), 0, axis), inner = dims_product(X.shape(), axis + 1, X.rank());
    if (k == 0 || outer * inner == 0) return;
    int64_t* order = static_cast<int64_t*>(ctx.workspace());
    int64_t* indices = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
    const bool largest = largest_;
    dispatch_numeric(X.dtype(), "TopK", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      const T* x = X.data<T>();
      T* values = ctx.has_output(0) ? ctx.output(0).data<T>() : nullptr;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* px = x + o * n * inner + i;
          auto at = [&](int64_t j) { return A::load(px[j * inner]); };
          // Strict weak order: NaN above everything, then value, then index.
          auto before = [&](int64_t a, int64_t b) {
            const auto va = at(a), vb = at(b);
            const bool na = va != va, nb = vb != vb;
            if (na || nb) {
              if (na && nb) return a < b;
              return largest ? na : nb;
            }
            if (va != vb) return largest ? va > vb : va < vb;
            return a < b;
          };
          for (int64_t j = 0; j < n; ++j) order[j] = j;
          std::partial_sort(order, order + k, order + n, before);
          const int64_t base = o * k * inner + i;
          for (int64_t j = 0; j < k; ++j) {
            if (values) values[base + j * inner] = px[order[j] * inner];
            if (indices) indices[base + j * inner] = order[j];
          }
        }
    });
  }

 private:
  static int64_t k_of(const Tensor& t, int64_t n) {
    if (t.size() != 1) fail("input K has shape {}, expected a single value", shape_str(t.shape()));
    const int64_t k = tensor_int_at(t, 0);
    if (k < 0 || k > n) fail("input K is {}, expected a value in [0, {}] (the axis size)", k, n);
    return k;
  }

  int64_t axis_ = -1;
  bool largest_ = true;
};

}  // namespace

void register_topk_op(OpRegistry& r) { 
  r.add_versions("", "TopK", {11, 24}, make_factory<TopKKernel>());  // 24: bfloat16
 }

}  // namespace onebit
