// RMSNorm as transformers exports it (LlamaRMSNorm / Qwen3RMSNorm):
//
//   x --Pow(2)--> --ReduceMean(axes [-1], keepdims)--> --Add(eps)--> --Sqrt--> --Reciprocal--> r
//   x --Mul(·, r)--> --Mul(w, ·)--> y                     (either operand order)
//
// (torch.onnx's TorchScript exporter writes Div(1, ·) for the Reciprocal,
// and a Cast to float32 before x and after Mul(x, r), which infer-dtypes
// removes from a float32 graph.)
//
// becomes com.onebit::RmsNorm(x, w), epsilon = eps: seven kernels and six
// intermediate tensors per norm become one pass over the rows (Qwen3-0.6B
// has 113 norms a token, counting q_norm and k_norm).
//
// A float16 export computes the norm in float32 between two Casts and
// scales in float16:
//
//   xh (float16) --Cast(to float)--> x, the chain above to Mul(x, r),
//   --Cast(to float16)--> --Mul(w float16, ·)--> y (float16)
//
// becomes RmsNorm(xh, w) on float16 x and w, which the kernel computes with
// the same two roundings (ops/rms_norm.cpp): nine kernels per norm.
//
// An export converted to float16 afterwards (onnxruntime's
// convert_float_to_float16, as transformers.js makes model_fp16.onnx) has
// the whole chain in float16, the Casts turned into Casts to float16 that
// infer-dtypes removes:
//
//   xh --Pow(2)--> ... --Mul(xh, r)--> --Mul(w float16, ·)--> y
//
// onnxruntime's CPU provider has no float16 kernel for Pow, ReduceMean,
// Add, Sqrt, Div or Mul: it runs the chain in float32 between Casts it
// inserts, which is the float16 form's computation (and Pow(x, 2) does not
// overflow past |x| = 256, as it would rounded to float16: SmolLM2's hidden
// states reach it). So this chain becomes the same RmsNorm(xh, w): the
// fused node computes it as onnxruntime does, not as the float16 nodes
// would one by one.
#include <cmath>
#include <limits>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"

namespace onebit {

namespace {

// The Cast producing `value` if it casts to `to`, else null.
const Node* cast_to(const Graph& g, int value, DType to) {
  const Node* cast = producer_op(g, value, "Cast");
  return cast && cast->attrs.get_int("to", 0) == static_cast<int64_t>(to) ? cast : nullptr;
}

// v where `value` is Reciprocal(v) or Div(1, v) (the same correctly rounded
// 1 / v), else -1.
int reciprocal_of(const Graph& g, int value) {
  if (const Node* recip = producer_op(g, value, "Reciprocal")) return input_at(*recip, 0);
  const Node* div = producer_op(g, value, "Div");
  if (!div || div->inputs.size() != 2) return -1;
  // A one of rank 0 or 1: it broadcasts to v's shape (v is a keepdims mean, of rank >= 1).
  const Tensor* c = input_constant(g, *div, 0);
  const auto one = constant_scalar(g, div->inputs[0]);
  return one && *one == 1.0 && c->rank() <= 1 ? div->inputs[1] : -1;
}

struct RmsNorm {
  int node = -1;  // the Mul(w, ·) that becomes the fused node
  int x = -1, weight = -1;  // x: the float16 value before the Cast, in the float16 form
  double epsilon = 0;
};

// Anchored on the last Mul; a Mul that is not the end of the chain is not a
// candidate, so this fusion has no refusals (a near miss is just two Muls).
Match<RmsNorm> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& mul_w = g.node(node);
  if (mul_w.op_type != "Mul" || !mul_w.domain.empty() || mul_w.inputs.size() != 2) return {};
  for (int side = 0; side < 2; ++side) {
    const int w = mul_w.inputs[static_cast<size_t>(side)], y = mul_w.inputs[static_cast<size_t>(1 - side)];
    if (w < 0 || y < 0) return {};
    const Value& wv = g.value(w);
    if (!wv.constant || wv.constant->rank() != 1) continue;
    const bool half = wv.constant->dtype() == DType::F16;
    if (!half && wv.constant->dtype() != DType::F32) continue;
    // float16: the normalized float32 row is rounded by a Cast before the
    // scale (none left in a chain all float16).
    const Node* narrow = half ? cast_to(g, y, DType::F16) : nullptr;
    const Node* mul_x = producer_op(g, narrow ? input_at(*narrow, 0) : y, "Mul");
    if (!mul_x || mul_x->inputs.size() != 2) continue;
    for (int xs = 0; xs < 2; ++xs) {
      const int x = mul_x->inputs[static_cast<size_t>(xs)], r = mul_x->inputs[static_cast<size_t>(1 - xs)];
      // float16: x is a float16 value widened by a Cast (and the row
      // narrowed after), or the chain is all float16; the fused node reads
      // the float16 value.
      const Node* widen = half ? cast_to(g, x, DType::F32) : nullptr;
      const int source = widen ? input_at(*widen, 0) : x;
      if (half && (source < 0 || g.value(source).dtype != DType::F16 || (widen && !narrow))) continue;
      const Node* sqrt = producer_op(g, reciprocal_of(g, r), "Sqrt");
      const Node* add = sqrt ? producer_op(g, input_at(*sqrt, 0), "Add") : nullptr;
      if (!add || add->inputs.size() != 2) continue;
      for (int es = 0; es < 2; ++es) {
        const auto eps = constant_scalar(g, add->inputs[static_cast<size_t>(es)]);
        const Node* mean = producer_op(g, add->inputs[static_cast<size_t>(1 - es)], "ReduceMean");
        if (!eps || !mean || mean->attrs.get_int("keepdims", 1) != 1) continue;
        if (std::isfinite(*eps) && std::abs(*eps) > std::numeric_limits<float>::max()) continue;  // no float epsilon
        const bool axes_last = (mean->inputs.size() > 1 && constant_ints_equal(g, input_at(*mean, 1), {-1})) ||
                               (mean->inputs.size() == 1 && mean->attrs.get_ints("axes", {}) == std::vector<int64_t>{-1});
        const Node* pow = producer_op(g, input_at(*mean, 0), "Pow");
        if (!axes_last || !pow || pow->inputs.size() != 2 || input_at(*pow, 0) != x) continue;
        const auto two = constant_scalar(g, input_at(*pow, 1));
        if (!two || *two != 2.0) continue;
        return RmsNorm{node, source, w, *eps};
      }
    }
  }
  return {};
}

}  // namespace

void fuse_rms_norm(Graph& g, PassContext& ctx) {
  Fusion<RmsNorm> f;
  f.name = "rms_norm";
  f.match = match;
  f.apply = [](Graph& g, const RmsNorm& m, std::vector<bool>&, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.node);
    make_onebit_node(n, "RmsNorm", {m.x, m.weight});
    n.attrs = Attributes();
    set_float_attr(n, "epsilon", static_cast<float>(m.epsilon));
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
