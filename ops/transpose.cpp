// Transpose: a strided view of the input copied out contiguously; a
// permutation that only moves axes of size 1 (a decode step's [1,1,H,D] to
// [1,H,1,D] and back) keeps every element where it is, so the output is a
// view of the input (copied only when the plan cannot make it one).
#include "ops/axis.h"
#include "graph/op_registry.h"
#include "ops/strided_copy.h"

namespace onebit {

namespace {

class TransposeKernel : public Kernel {
 public:
  explicit TransposeKernel(const KernelInfo& info) : perm_(info.attrs().get_ints("perm")) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& in = ctx.shape(0);
    const std::vector<int64_t> perm = resolve(static_cast<int64_t>(in.size()));
    Shape out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = in[static_cast<size_t>(perm[i])];
    if (keeps_order(in, perm) && dtype_bits(ctx.dtype(0)) >= 8) ctx.alias_output(0, 0, out);
    else ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (ctx.output(0).raw() == x.raw() && x.size() > 0) return;  // the view reshape planned
    const std::vector<int64_t> perm = resolve(x.rank());
    const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
    StridedView view{static_cast<const uint8_t*>(x.raw()), ctx.output(0).shape(), {}};
    for (int64_t p : perm) view.strides.push_back(in_strides[static_cast<size_t>(p)]);
    if (dtype_bits(x.dtype()) < 8) fail("Transpose does not support {}", dtype_name(x.dtype()));
    strided_copy(view, ctx.output(0).raw(), static_cast<size_t>(dtype_bits(x.dtype()) / 8), ctx.pool());
  }

 private:
  // Whether the axes longer than 1 keep their order under perm.
  static bool keeps_order(const Shape& in, const std::vector<int64_t>& perm) {
    int64_t last = -1;
    for (int64_t p : perm) {
      if (in[static_cast<size_t>(p)] == 1) continue;
      if (p < last) return false;
      last = p;
    }
    return true;
  }
  std::vector<int64_t> resolve(int64_t rank) const {
    if (perm_.empty()) {
      std::vector<int64_t> p(static_cast<size_t>(rank));
      for (int64_t i = 0; i < rank; ++i) p[static_cast<size_t>(i)] = rank - 1 - i;
      return p;
    }
    if (static_cast<int64_t>(perm_.size()) != rank)
      fail("attribute 'perm' has {} entries, the input has rank {}", perm_.size(), rank);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    std::vector<int64_t> p;
    for (int64_t a : perm_) {
      const int64_t axis = normalize_axis(a, rank, "perm entry");
      if (seen[static_cast<size_t>(axis)]) fail("attribute 'perm' repeats axis {}", a);
      seen[static_cast<size_t>(axis)] = true;
      p.push_back(axis);
    }
    return p;
  }
  std::vector<int64_t> perm_;
};

}  // namespace

void register_transpose_op(OpRegistry& r) { 
  // 21, 23, 24, 25 add 4-bit, float4e2m1, float8e8m0 and 2-bit types.
  r.add_versions("", "Transpose", {13, 21, 23, 24, 25}, make_factory<TransposeKernel>());
 }

}  // namespace onebit
