// The gated MLP's activation as transformers exports it (LlamaMLP,
// Qwen3MLP: down(act_fn(gate(x)) * up(x)) with act_fn SiLU, which torch
// writes as x * Sigmoid(x)):
//
//   g --Sigmoid--> s --Mul(g, s)--> silu --Mul(silu, u)--> y   (either operand order)
//
// becomes com.onebit::SwiGlu(g, u): three kernels and two intermediates per
// layer become one pass (ops/swiglu.cpp, bit-identical).
//
// The kernel takes two tensors of one shape and float32 or float16, which a
// broadcasting Mul does not promise, so the group is refused unless the
// file proves both:
//   - the dtype: every declared dtype among g, s, silu, u and y is float32,
//     or every one float16, and at least one is declared;
//   - the shape: g and u declared with equal dims (every dim a number or a
//     symbolic name), or made by sibling nodes (one op, the same first
//     input, equal attributes, constant other inputs of equal shape: gate
//     and up projections of one x; for ops other than MatMul and Gemm the
//     constants must be equal, since a Slice's bounds or a Reshape's target
//     fix the shape by their values), or Slices of one value along one
//     axis to lengths proven equal (Phi-3's halves of one projection).
// s and silu must have no reader but the chain and not be graph outputs.
#include <cstring>

#include "graph/passes/fusion.h"
#include "graph/passes/match.h"
#include "graph/passes/proven_dims.h"

namespace onebit {

namespace {

struct SwiGlu {
  int node = -1;  // the Mul(silu, u) that becomes the fused node
  int gate = -1, up = -1;
};

bool dims_known_equal(const Value& a, const Value& b) {
  if (!a.has_shape || !b.has_shape || a.dims.size() != b.dims.size()) return false;
  for (size_t i = 0; i < a.dims.size(); ++i)
    if (!dim_known_equal(a.dims[i], b.dims[i])) return false;
  return true;
}

bool attrs_equal(const Attributes& a, const Attributes& b) {
  if (a.all().size() != b.all().size()) return false;
  for (const auto& [name, x] : a.all()) {
    const Attribute* y = b.find(name);
    if (!y || y->kind != x.kind) return false;
    switch (x.kind) {
      case Attribute::Kind::Int: if (x.i != y->i) return false; break;
      case Attribute::Kind::Float: if (x.f != y->f) return false; break;
      case Attribute::Kind::String: if (x.s != y->s) return false; break;
      case Attribute::Kind::Ints: if (x.ints != y->ints) return false; break;
      case Attribute::Kind::Floats: if (x.floats != y->floats) return false; break;
      default: return false;  // tensors, graphs: not compared, so not proven equal
    }
  }
  return true;
}

// An op whose output shape a constant input fixes by its shape alone (a
// weight's [K, N]), not by its values as a Slice's bounds or a Reshape's
// target do.
bool shape_from_weight_shape(const Node& n) {
  return n.op_type.find("MatMul") != std::string::npos || n.op_type == "Gemm";
}

// Both single-output nodes of one op on the same first input, with equal
// attributes and constant other inputs of equal shape (a MatMul's or Gemm's
// weights) or of equal values (any other op: two Slices of one x with other
// bounds are no siblings).
bool siblings(const Graph& g, int a, int b) {
  const Node* p = producer_node(g, a);
  const Node* q = producer_node(g, b);
  if (!p || !q || p == q || p->op_type != q->op_type || p->domain != q->domain || p->outputs.size() != 1 ||
      q->outputs.size() != 1 || p->inputs.size() != q->inputs.size() || p->inputs.empty() ||
      p->inputs[0] < 0 || p->inputs[0] != q->inputs[0] || !attrs_equal(p->attrs, q->attrs))
    return false;
  for (size_t i = 1; i < p->inputs.size(); ++i) {
    if ((p->inputs[i] < 0) != (q->inputs[i] < 0)) return false;
    if (p->inputs[i] < 0) continue;
    const Tensor* x = input_constant(g, *p, i);
    const Tensor* y = input_constant(g, *q, i);
    if (!x || !y || x->shape() != y->shape() || x->dtype() != y->dtype()) return false;
    if (!shape_from_weight_shape(*p) &&
        (!x->raw() || !y->raw() || std::memcmp(x->raw(), y->raw(), x->bytes()) != 0))
      return false;
  }
  return true;
}

// Both Slices of one value along one axis (a single constant axis, step 1)
// to lengths proven equal (graph/passes/proven_dims.h): Phi-3's gate and up
// halves of one projection, chunk(2, -1). Every other dim is the value's.
bool equal_slices(const Graph& g, int a, int b) {
  const Node* p = producer_op(g, a, "Slice");
  const Node* q = producer_op(g, b, "Slice");
  if (!p || !q || p == q || p->inputs.size() < 4 || q->inputs.size() < 4 || input_at(*p, 0) < 0 ||
      input_at(*p, 0) != input_at(*q, 0))
    return false;
  const Tensor* pa = input_constant(g, *p, 3);
  const Tensor* qa = input_constant(g, *q, 3);
  if (!pa || !qa || pa->size() != 1 || qa->size() != 1 || !dtype_is_integer(pa->dtype()) ||
      !dtype_is_integer(qa->dtype()) || tensor_int_at(*pa, 0) != tensor_int_at(*qa, 0))
    return false;
  for (const Node* n : {p, q})
    if (input_at(*n, 4) >= 0 && !constant_ints_equal(g, input_at(*n, 4), {1})) return false;
  const int64_t axis = tensor_int_at(*pa, 0);
  const auto da = proven_dim(g, a, axis), db = proven_dim(g, b, axis);
  return da && db && *da == *db;
}

// The dtype every declared one of `values` agrees on, Undefined when none is
// declared, or Bool (never float) when two disagree.
DType declared_dtype(const Graph& g, std::initializer_list<int> values) {
  DType t = DType::Undefined;
  for (int v : values) {
    const DType d = g.value(v).dtype;
    if (d == DType::Undefined) continue;
    if (t != DType::Undefined && t != d) return DType::Bool;
    t = d;
  }
  return t;
}

// Anchored on the outer Mul; a Mul whose operand is not a Mul of some g
// and Sigmoid(g) is not a candidate.
Match<SwiGlu> match(const FusionScan& scan, int node) {
  const Graph& g = scan.g;
  const Node& mul = g.node(node);
  if (mul.op_type != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 || mul.outputs.size() != 1) return {};
  for (int side = 0; side < 2; ++side) {
    const int silu = mul.inputs[static_cast<size_t>(side)], up = mul.inputs[static_cast<size_t>(1 - side)];
    const Node* inner = producer_op(g, silu, "Mul");
    if (!inner || inner->inputs.size() != 2 || up < 0) continue;
    for (int gs = 0; gs < 2; ++gs) {
      const int gate = inner->inputs[static_cast<size_t>(gs)], s = inner->inputs[static_cast<size_t>(1 - gs)];
      const Node* sigmoid = producer_op(g, s, "Sigmoid");
      if (!sigmoid || input_at(*sigmoid, 0) != gate || gate < 0) continue;
      if (!only_reader(scan, s, producer_index(g, silu)) || !only_reader(scan, silu, node))
        return Refusal{"intermediate_read_elsewhere"};
      const DType t = declared_dtype(g, {gate, s, silu, up, mul.outputs[0]});
      if (t == DType::Undefined) return Refusal{"dtype_unknown"};
      if (t != DType::F32 && t != DType::F16) return Refusal{"dtype_not_float32_or_float16"};
      if (!dims_known_equal(g.value(gate), g.value(up)) && !siblings(g, gate, up) && !equal_slices(g, gate, up))
        return Refusal{"shapes_not_known_equal"};
      return SwiGlu{node, gate, up};
    }
  }
  return {};
}

}  // namespace

void fuse_swiglu(Graph& g, PassContext& ctx) {
  Fusion<SwiGlu> f;
  f.name = "swiglu";
  f.match = match;
  f.apply = [](Graph& g, const SwiGlu& m, std::vector<bool>& drop, std::map<std::string, int64_t>&) {
    Node& n = g.node(m.node);
    const int silu = other_input(n, m.up);
    const int inner = producer_index(g, silu);
    drop[static_cast<size_t>(inner)] = true;
    drop[static_cast<size_t>(producer_index(g, other_input(g.node(inner), m.gate)))] = true;
    make_onebit_node(n, "SwiGlu", {m.gate, m.up});
    n.attrs = Attributes();
  };
  run_fusion(g, ctx, f);
}

}  // namespace onebit
