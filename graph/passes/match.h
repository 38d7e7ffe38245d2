// Small helpers the fusion matchers share: they only read the graph.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace onebit {

// Input `i` of `n`, or -1 when the node has fewer inputs: a matcher reads a
// producer's inputs before any kernel has checked its arity.
inline int input_at(const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; }

// The node producing `value` if it is an ai.onnx `op`, else null.
inline const Node* producer_op(const Graph& g, int value, const char* op) {
  if (value < 0) return nullptr;
  const int p = g.value(value).producer;
  if (p < 0) return nullptr;
  const Node& n = g.node(p);
  return n.op_type == op && n.domain.empty() ? &n : nullptr;
}

inline int producer_index(const Graph& g, int value) {
  return value < 0 ? -1 : g.value(value).producer;
}

// The node producing `value`, whatever its op; null for inputs and constants.
inline const Node* producer_node(const Graph& g, int value) {
  const int p = producer_index(g, value);
  return p < 0 ? nullptr : &g.node(p);
}

// `op` in ai.onnx or com.microsoft (Quark and onnxruntime write Q/DQ in either).
inline bool is_q_op(const Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == "com.microsoft");
}

// Input `i` of `n` if it is a constant, else null.
inline const Tensor* input_constant(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i] < 0) return nullptr;
  const Value& v = g.value(n.inputs[i]);
  return v.constant ? &*v.constant : nullptr;
}

// The element type of `value`: a constant's own, else the declared one
// (Undefined for -1 or when the file says nothing).
inline DType value_dtype(const Graph& g, int value) {
  if (value < 0) return DType::Undefined;
  const Value& v = g.value(value);
  return v.constant ? v.constant->dtype() : v.dtype;
}

// The value of a constant holding exactly one number, as double.
inline std::optional<double> constant_scalar(const Graph& g, int value) {
  if (value < 0) return std::nullopt;
  const Value& v = g.value(value);
  if (!v.constant || v.constant->size() != 1 || !v.constant->raw()) return std::nullopt;
  return tensor_double_at(*v.constant, 0);
}

// The integers of a constant of rank 0 or 1 with at most `max` elements
// (indices, axes, bounds); `scalar` (when given) says whether it is rank 0.
inline std::optional<std::vector<int64_t>> constant_int_list(const Graph& g, int value, size_t max,
                                                             bool* scalar = nullptr) {
  if (value < 0) return std::nullopt;
  const Value& v = g.value(value);
  if (!v.constant || !v.constant->raw() || !dtype_is_integer(v.constant->dtype()) || v.constant->rank() > 1 ||
      static_cast<size_t>(v.constant->size()) > max)
    return std::nullopt;
  if (scalar) *scalar = v.constant->rank() == 0;
  return tensor_to_ints(*v.constant);
}

inline bool constant_ints_equal(const Graph& g, int value, const std::vector<int64_t>& want) {
  if (value < 0) return false;
  const Value& v = g.value(value);
  return v.constant && v.constant->raw() && dtype_is_integer(v.constant->dtype()) &&
         tensor_to_ints(*v.constant) == want;
}

// Whether two declared dims are known to be equal: the same value, or the
// same symbolic name on two dims without a value.
inline bool dim_known_equal(const Dim& x, const Dim& y) {
  return x.value >= 0 ? x.value == y.value : !x.param.empty() && x.param == y.param && y.value < 0;
}

// For a binary node, the input that is not `known` (-1 if neither matches).
inline int other_input(const Node& n, int known) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == known) return n.inputs[1];
  if (n.inputs[1] == known) return n.inputs[0];
  return -1;
}

// Rewriting helpers for the fusions' rewrite halves.
inline void set_int_attr(Node& n, const std::string& name, int64_t v) {
  Attribute a;
  a.kind = Attribute::Kind::Int;
  a.i = v;
  n.attrs.set(name, a);
}

inline void set_float_attr(Node& n, const std::string& name, float v) {
  Attribute a;
  a.kind = Attribute::Kind::Float;
  a.f = v;
  n.attrs.set(name, a);
}

// A new scalar constant value named after `base`, float32 or (rounded to
// it) float16; its id.
int add_scalar_constant(Graph& g, const std::string& base, float v, DType dtype = DType::F32);

// Turns `n` into a com.onebit node of type `op` (version 1) reading `inputs`.
void make_onebit_node(Node& n, const char* op, std::vector<int> inputs);

}  // namespace onebit
