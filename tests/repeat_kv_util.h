// onnxruntime-genai's float16 attention computes the targets of its KV-head
// repeat from each cache's Shape; tests build that chain here, and variants
// of it the proof in graph/passes/shape_expr.h must not accept.
#pragma once

#include <cstdint>
#include <string>

#include "model_builder.h"

namespace onebit::test {

struct RepeatTargets {
  int64_t rep = 3;
  int64_t equal_to = -1;      // what the Equal compares the target with (-1 as the builder writes it)
  bool cos_value = true;      // ConstantOfShape with an int64 value (else its float default)
  std::string gather1;        // Gather dim 1 at this graph input instead of a constant index
  int64_t r_mul = 0;          // r's heads multiplied by this (0: by rep)
  bool two_dims = false;      // r's heads as dim 1 times dim 0
};

// Adds, for cache [b, kvh, T, d], the nodes writing
//   e = Where(Equal(t, -1), ones, t), t = [b, kvh, rep, T, d]   (value `e`)
//   r = [b, kvh·rep, T, d]                                       (value `r`)
// each dim taken by Shape -> Gather -> Unsqueeze; node and value names
// start with `p`.
inline void add_repeat_kv_targets(ModelBuilder& b, const std::string& cache, const std::string& p,
                                  const std::string& e, const std::string& r, const RepeatTargets& c = {}) {
  constexpr int32_t kInt64 = 7;
  for (int i = 0; i < 4; ++i) b.initializer<int64_t>(p + "i" + std::to_string(i), kInt64, {}, {i});
  b.initializer<int64_t>(p + "zero", kInt64, {1}, {0});
  b.initializer<int64_t>(p + "rep", kInt64, {1}, {c.rep});
  b.initializer<int64_t>(p + "rep_s", kInt64, {}, {c.r_mul ? c.r_mul : c.rep});
  b.initializer<int64_t>(p + "flat", kInt64, {1}, {-1});
  b.initializer<int64_t>(p + "cmp", kInt64, {}, {c.equal_to});
  b.node("Shape", {cache}, {p + "s"});
  for (int i = 0; i < 4; ++i) {
    const std::string n = std::to_string(i);
    const std::string index = i == 1 && !c.gather1.empty() ? c.gather1 : p + "i" + n;
    ModelBuilder::attr_int(b.node("Gather", {p + "s", index}, {p + "g" + n}), "axis", 0);
    b.node("Unsqueeze", {p + "g" + n, p + "zero"}, {p + "u" + n});
  }
  ModelBuilder::attr_int(b.node("Concat", {p + "u0", p + "u1", p + "rep", p + "u2", p + "u3"}, {p + "t0"}), "axis", 0);
  b.node("Mul", {p + "u1", c.two_dims ? p + "u0" : p + "rep_s"}, {p + "heads"});
  ModelBuilder::attr_int(b.node("Concat", {p + "u0", p + "heads", p + "u2", p + "u3"}, {r}), "axis", 0);
  b.node("Reshape", {p + "t0", p + "flat"}, {p + "t"});
  b.node("Shape", {p + "t"}, {p + "ts"});
  auto& cos = b.node("ConstantOfShape", {p + "ts"}, {p + "ones"});
  if (c.cos_value) {
    auto* a = cos.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(kInt64);
    a->mutable_t()->add_dims(1);
    a->mutable_t()->add_int64_data(1);
  }
  b.node("Equal", {p + "t", p + "cmp"}, {p + "eq"});
  b.node("Where", {p + "eq", p + "ones", p + "t"}, {e});
}

}  // namespace onebit::test
