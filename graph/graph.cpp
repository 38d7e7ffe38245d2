#include "graph/graph.h"

#include <algorithm>
#include <fmt/format.h>

#include "base/error.h"

namespace onebit {

namespace {
const char* kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Float: return "float";
    case Attribute::Kind::Int: return "int";
    case Attribute::Kind::String: return "string";
    case Attribute::Kind::Tensor: return "tensor";
    case Attribute::Kind::Graph: return "graph";
    case Attribute::Kind::Floats: return "floats";
    case Attribute::Kind::Ints: return "ints";
    case Attribute::Kind::Strings: return "strings";
    case Attribute::Kind::Other: return "other";
  }
  return "?";
}

const Attribute& expect_kind(const Attribute& a, const std::string& name, Attribute::Kind k) {
  if (a.kind != k) fail("attribute '{}' is {}, expected {}", name, kind_name(a.kind), kind_name(k));
  return a;
}
}  // namespace

const Attribute* Attributes::find(const std::string& name) const {
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : &it->second;
}

int64_t Attributes::get_int(const std::string& name, int64_t dflt) const {
  const Attribute* a = find(name);
  return a ? expect_kind(*a, name, Attribute::Kind::Int).i : dflt;
}

int64_t Attributes::get_int(const std::string& name) const {
  const Attribute* a = find(name);
  if (!a) fail("required attribute '{}' is missing", name);
  return expect_kind(*a, name, Attribute::Kind::Int).i;
}

float Attributes::get_float(const std::string& name, float dflt) const {
  const Attribute* a = find(name);
  return a ? expect_kind(*a, name, Attribute::Kind::Float).f : dflt;
}

std::string Attributes::get_string(const std::string& name, const std::string& dflt) const {
  const Attribute* a = find(name);
  return a ? expect_kind(*a, name, Attribute::Kind::String).s : dflt;
}

std::vector<int64_t> Attributes::get_ints(const std::string& name, std::vector<int64_t> dflt) const {
  const Attribute* a = find(name);
  return a ? expect_kind(*a, name, Attribute::Kind::Ints).ints : dflt;
}

std::vector<float> Attributes::get_floats(const std::string& name, std::vector<float> dflt) const {
  const Attribute* a = find(name);
  return a ? expect_kind(*a, name, Attribute::Kind::Floats).floats : dflt;
}

const Tensor* Attributes::get_tensor(const std::string& name) const {
  const Attribute* a = find(name);
  return a ? &expect_kind(*a, name, Attribute::Kind::Tensor).t : nullptr;
}

Tensor constant_node_value(const Attributes& a) {
  Tensor value;
  int given = 0;
  if (const Tensor* t = a.get_tensor("value")) {
    value = *t;
    ++given;
  }
  if (a.has("value_float")) {
    value = Tensor::allocate(DType::F32, {});
    *value.data<float>() = a.get_float("value_float", 0);
    ++given;
  }
  if (a.has("value_floats")) {
    const auto v = a.get_floats("value_floats");
    value = Tensor::allocate(DType::F32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), value.data<float>());
    ++given;
  }
  if (a.has("value_int")) {
    value = Tensor::allocate(DType::I64, {});
    *value.data<int64_t>() = a.get_int("value_int");
    ++given;
  }
  if (a.has("value_ints")) {
    const auto v = a.get_ints("value_ints");
    value = Tensor::allocate(DType::I64, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), value.data<int64_t>());
    ++given;
  }
  if (a.has("value_string") || a.has("value_strings")) fail("string constants are not supported");
  if (a.has("sparse_value")) fail("sparse constants are not supported");
  if (given != 1) fail("Constant needs exactly one value attribute, got {}", given);
  return value;
}

int Graph::find_value(const std::string& name) const {
  if (index_.size() != values.size()) {
    index_.clear();
    for (size_t i = 0; i < values.size(); ++i) index_.emplace(values[i].name, static_cast<int>(i));
  }
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int Graph::add_value(Value v) {
  find_value("");  // bring the index up to date before it grows
  const int id = static_cast<int>(values.size());
  index_.emplace(v.name, id);
  values.push_back(std::move(v));
  return id;
}

std::string Graph::unique_name(const std::string& base) const {
  if (find_value(base) < 0) return base;
  for (int i = 1;; ++i) {
    std::string name = fmt::format("{}_{}", base, i);
    if (find_value(name) < 0) return name;
  }
}

std::string Graph::node_ref(const Node& n) const {
  std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
  return fmt::format("node '{}' ({})", n.name, op);
}

std::string Graph::node_label(const Node& n) const { return fmt::format("{}: {}", path, node_ref(n)); }

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> c(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int v : nodes[n].inputs)
      if (v >= 0) c[static_cast<size_t>(v)].push_back(static_cast<int>(n));
  return c;
}

void Graph::relink() {
  for (Value& v : values) v.producer = -1;
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int v : nodes[n].outputs)
      if (v >= 0) values[static_cast<size_t>(v)].producer = static_cast<int>(n);
}

void Graph::id_out_of_range(int id, size_t size, const char* what) {
  fail("{} id {} is out of range (the graph has {}): an omitted input where one is required?", what, id, size);
}

std::string domain_name(const std::string& domain) { return domain.empty() ? "ai.onnx" : domain; }

}  // namespace onebit
