// com.onebit::RotaryHalf(x [..., d], cos, sin), half — written by
// graph/rotary_fusion.cpp. y = x·cos + rotate_half(x)·sin with
// rotate_half(x) = concat(-x[..., half:], x[..., :half]); cos and sin
// broadcast to x (multidirectionally, as the Mul nodes did). Each element
// is computed with the float operations of the unfused nodes, in their
// order, so the result is bit-identical.
#include "ops/broadcast.h"
#include "graph/op_registry.h"
#include "base/thread_pool.h"

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

class RotaryHalfKernel : public Kernel {
 public:
  explicit RotaryHalfKernel(const KernelInfo& info) : half_(info.attrs().get_int("half")) {}

  void reshape(ReshapeContext& ctx) override {
    for (int i = 0; i < 3; ++i)
      if (ctx.dtype(i) != DType::F32) fail("input {} is {}, expected float32", i, dtype_name(ctx.dtype(i)));
    const Shape& x = ctx.shape(0);
    if (x.empty() || x.back() != 2 * half_)
      fail("x {} must have a last dim of 2 * half = {}", shape_str(x), 2 * half_);
    const Shape out = broadcast_shapes({x, ctx.shape(1), ctx.shape(2)});
    if (out != x) fail("cos {} and sin {} must broadcast to x {}", shape_str(ctx.shape(1)), shape_str(ctx.shape(2)), shape_str(x));
    if (ctx.shape(1).empty() || ctx.shape(1).back() != x.back() || ctx.shape(2).empty() || ctx.shape(2).back() != x.back())
      fail("cos {} and sin {} must span the last dim of x {}", shape_str(ctx.shape(1)), shape_str(ctx.shape(2)), shape_str(x));
    ctx.set_output(0, DType::F32, x);
  }

  void run(RunContext& ctx) override {
    const Tensor& X = ctx.input(0);
    const Shape& shape = X.shape();
    const int64_t d = shape.back(), rows = X.size() / d, h = half_;
    const std::vector<int64_t> cs = broadcast_strides(ctx.input(1).shape(), shape);
    const std::vector<int64_t> ss = broadcast_strides(ctx.input(2).shape(), shape);
    const float* x = X.data<float>();
    const float* cos = ctx.input(1).data<float>();
    const float* sin = ctx.input(2).data<float>();
    float* y = ctx.output(0).data<float>();
    const size_t outer = shape.size() - 1;
    const int64_t grain = std::max<int64_t>(1, 2048 / d);
    ctx.pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t rem = r, co = 0, so = 0;
        for (size_t k = outer; k-- > 0;) {
          const int64_t i = rem % shape[k];
          rem /= shape[k];
          co += i * cs[k];
          so += i * ss[k];
        }
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
  int64_t half_;
};

}  // namespace

void register_rotary_op(OpRegistry& r) { r.add(kOneBitDomain, "RotaryHalf", 1, 1, make_factory<RotaryHalfKernel>()); }

}  // namespace onebit
