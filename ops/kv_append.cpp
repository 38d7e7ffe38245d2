// com.onebit::KvAppend(new, past), written by graph/kv_state.cpp: one
// layer's K or V cache, kept by the kernel across runs.
//   new  [1, kvh, S, d] float32 or float16 (a float16 model's: widened,
//        exactly, before the state stores it as float32 or float16);
//   past any tensor whose dim `past_axis` is the past length P (its data is
//        never read; the caller passes a shape-only tensor).
// Outputs:
//   0  the cache after appending, [1, kvh, P+S, d] float32 or float16
//      (KernelOptions::kv_dtype), each head's positions
//      contiguous as in the exported cache, but heads `head_stride` floats
//      apart: the state has room for `capacity` positions per head, so an
//      append writes only the S new positions. It is not a dense tensor;
//      only GqaMatMul reads it, given output 1 (the pass checks this).
//   1  head_stride, int64 scalar: capacity · d (elements).
// The state follows one sequence: P is at most the positions it holds; fewer
// takes the rest back (rejected drafts), 0 starts a new sequence.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "graph/op_registry.h"
#include "base/memory_budget.h"
#include "base/sizes.h"
#include "ops/kv_store.h"
#include "quant/ukernels/kernel_config.h"

namespace onebit {

namespace {

class KvAppendKernel : public Kernel {
 public:
  explicit KvAppendKernel(const KernelInfo& info)
      : past_axis_(info.attrs().get_int("past_axis")), store_(info.options().kv_dtype) {}

  bool needs_input_data(int input) const override { return input == 0; }
  // run() takes the past from its input, checks what reshape checks and
  // reserves the room itself: a plan may grow it (Kernel::follows_growth).
  bool follows_growth() const override { return true; }

  void reshape(ReshapeContext& ctx) override {
    const Shape& x = ctx.shape(0);
    const int64_t total = check(ctx.dtype(0), x, ctx.shape(1));
    // Planning for a longer sequence (the generator reserves for its last
    // step) sizes the state now, so the decode steps allocate nothing.
    store_.reserve(x[1], x[3], total);
    ctx.hold_output(0, store_.dtype(), {1, x[1], total, x[3]});
    ctx.set_output(1, DType::I64, {});
  }

  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const int64_t total = check(x.dtype(), x.shape(), ctx.input(1).shape());
    const int64_t kvh = x.dim(1), s = x.dim(2), d = x.dim(3), past = total - s;
    store_.continue_at(past);
    store_.reserve(kvh, d, past + s);
    const float* src = x.dtype() == DType::F32 ? x.data<float>() : nullptr;
    if (!src) {
      wide_.resize(static_cast<size_t>(x.size()));
      vec_math_config().widen(wide_.size(), x.data<uint16_t>(), wide_.data());
      src = wide_.data();
    }
    for (int64_t h = 0; h < kvh; ++h) store_.put(h, past, src + h * s * d, s);
    store_.length = past + s;
    ctx.output(0) = Tensor(store_.dtype(), {1, kvh, store_.length, d}, store_.data(), store_.owner());
    *ctx.output(1).data<int64_t>() = store_.head_stride();
  }

  // What reshape checks and run checks again: new positions [1, kvh, S, d]
  // of float32 or float16, past_axis inside the past's shape. Returns P + S.
  int64_t check(DType t, const Shape& x, const Shape& past) const {
    if (t != DType::F32 && t != DType::F16)
      fail("new keys or values are {}, expected float32 or float16", dtype_name(t));
    if (x.size() != 4 || x[0] != 1)
      fail("new keys or values have shape {}, expected [1, kv_heads, S, head_dim]", shape_str(x));
    if (past_axis_ < 0 || past_axis_ >= static_cast<int64_t>(past.size()))
      fail("past_axis {} is outside the past's shape {}", past_axis_, shape_str(past));
    return checked_add(past[static_cast<size_t>(past_axis_)], x[2], "the KV positions");
  }

  std::string describe() const override {
    return fmt::format("KV state ({}), {} of {} positions held", dtype_name(store_.dtype()), store_.length,
                       store_.capacity());
  }

 private:
  int64_t past_axis_;
  KvStore store_;
  std::vector<float> wide_;  // float16 new positions, widened
};

}  // namespace

void register_kv_append_op(OpRegistry& r) { r.add(kOneBitDomain, "KvAppend", 1, 1, make_factory<KvAppendKernel>()); }

}  // namespace onebit
