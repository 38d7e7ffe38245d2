// ScatterND and ScatterElements (opsets 13 to 27: reduction none, add and mul
// from 16, max and min from 18). The output starts as a copy of data;
// updates are applied in index order, so with reduction 'none' a repeated
// index keeps the last update.
#include <cstring>

#include "ops/axis.h"
#include "ops/dispatch.h"
#include "graph/op_registry.h"
#include "ops/strided_copy.h"

namespace onebit {

namespace {

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parse_reduction(const KernelInfo& info) {
  info.refuse_before("reduction", 16);
  const std::string r = info.attrs().get_string("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (info.opset() >= 18 && r == "max") return Reduction::Max;  // max and min came with opset 18
  if (info.opset() >= 18 && r == "min") return Reduction::Min;
  fail("attribute 'reduction' is '{}', expected none, add, mul{}", r, info.opset() >= 18 ? ", max or min" : "");
}

int64_t fix_index(int64_t i, int64_t dim) {
  if (i < -dim || i >= dim) fail("index {} is out of range for a dim of size {}", i, dim);
  return i < 0 ? i + dim : i;
}

template <class T>
void apply(T* dst, const T* src, int64_t n, Reduction r) {
  using A = Arith<T>;
  for (int64_t k = 0; k < n; ++k) {
    const auto a = A::load(dst[k]), b = A::load(src[k]);
    switch (r) {
      case Reduction::None: dst[k] = src[k]; break;
      case Reduction::Add: dst[k] = A::store(static_cast<typename A::C>(a + b)); break;
      case Reduction::Mul: dst[k] = A::store(static_cast<typename A::C>(a * b)); break;
      case Reduction::Max: dst[k] = A::store(a > b ? a : b); break;
      case Reduction::Min: dst[k] = A::store(a < b ? a : b); break;
    }
  }
}

template <class F>
void with_elements(DType t, Reduction r, F&& f) {
  if (r == Reduction::None || t == DType::Bool) return dispatch_width(t, "Scatter", std::forward<F>(f));
  dispatch_numeric(t, "Scatter", std::forward<F>(f));
}

class ScatterNDKernel : public Kernel {
 public:
  explicit ScatterNDKernel(const KernelInfo& info) : reduction_(parse_reduction(info)) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& data = ctx.shape(0);
    const Shape& ind = ctx.shape(1);
    if (ctx.dtype(1) != DType::I64) fail("indices must be int64, got {}", dtype_name(ctx.dtype(1)));
    if (ind.empty() || ind.back() < 1 || ind.back() > static_cast<int64_t>(data.size()))
      fail("indices {} do not fit data {}", shape_str(ind), shape_str(data));
    Shape expect(ind.begin(), ind.end() - 1);
    expect.insert(expect.end(), data.begin() + ind.back(), data.end());
    if (ctx.shape(2) != expect) fail("updates have shape {}, expected {}", shape_str(ctx.shape(2)), shape_str(expect));
    ctx.set_output(0, ctx.dtype(0), data);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    Tensor& y = ctx.output(0);
    if (y.raw() != x.raw() && x.bytes()) std::memcpy(y.raw(), x.raw(), x.bytes());
    const Shape& data = x.shape();
    const size_t last = static_cast<size_t>(idx.shape().back());
    int64_t slice = 1;
    for (size_t d = last; d < data.size(); ++d) slice *= data[d];
    const int64_t tuples = idx.size() / static_cast<int64_t>(last);
    const int64_t* ip = idx.data<int64_t>();
    with_elements(x.dtype(), reduction_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t j = 0; j < tuples; ++j) {
        int64_t off = 0;
        for (size_t k = 0; k < last; ++k) off = off * data[k] + fix_index(ip[j * static_cast<int64_t>(last) + static_cast<int64_t>(k)], data[k]);
        apply(y.data<T>() + off * slice, upd.data<T>() + j * slice, slice, reduction_);
      }
    });
  }

 private:
  Reduction reduction_;
};

class ScatterElementsKernel : public Kernel {
 public:
  explicit ScatterElementsKernel(const KernelInfo& info)
      : axis_(info.attrs().get_int("axis", 0)), reduction_(parse_reduction(info)) {}
  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(1) != DType::I64 && ctx.dtype(1) != DType::I32)
      fail("indices must be int32 or int64, got {}", dtype_name(ctx.dtype(1)));
    if (ctx.shape(1) != ctx.shape(2))
      fail("indices {} and updates {} must have one shape", shape_str(ctx.shape(1)), shape_str(ctx.shape(2)));
    if (ctx.rank(1) != ctx.rank(0)) fail("indices {} and data {} must have one rank", shape_str(ctx.shape(1)), shape_str(ctx.shape(0)));
    normalize_axis(axis_, ctx.rank(0), "attribute 'axis'");
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    Tensor& y = ctx.output(0);
    if (y.raw() != x.raw() && x.bytes()) std::memcpy(y.raw(), x.raw(), x.bytes());
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, x.rank()));
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const Shape& is = idx.shape();
    with_elements(x.dtype(), reduction_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<int64_t> pos(is.size(), 0);
      for (int64_t t = 0; t < idx.size(); ++t) {
        int64_t off = 0;
        for (size_t d = 0; d < is.size(); ++d)
          off += (d == axis ? fix_index(tensor_int_at(idx, t), x.shape()[d]) : pos[d]) * xs[d];
        apply(y.data<T>() + off, upd.data<T>() + t, 1, reduction_);
        for (size_t d = is.size(); d-- > 0;) {
          if (++pos[d] < is[d]) break;
          pos[d] = 0;
        }
      }
    });
  }

 private:
  int64_t axis_;
  Reduction reduction_;
};

}  // namespace

void register_scatter_ops(OpRegistry& r) {
  r.add_versions("", "ScatterND", {13, 16, 18}, make_factory<ScatterNDKernel>());
  r.add_versions("", "ScatterElements", {13, 16, 18}, make_factory<ScatterElementsKernel>());
}

}  // namespace onebit
