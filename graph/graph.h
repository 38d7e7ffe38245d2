// The IR: values, nodes and the graph that owns them. Built by the loader (the
// only code that sees protobuf), rewritten by passes, run by the session.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "graph/tensor.h"

namespace onebit {

// A subgraph attribute (If's branches) as 1bit keeps it: its outputs when
// each is a constant the subgraph defines itself (an initializer or a
// Constant node, no inputs, nothing read from the enclosing graph); else
// `not_constant` says what stands in the way. Subgraphs are not run.
struct ConstantBranch {
  std::vector<std::string> names;  // the subgraph's outputs, in order
  std::vector<Tensor> outputs;     // their values (empty unless constant)
  std::string not_constant;        // empty when every output is a constant
};

struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Graph, Floats, Ints, Strings, Other };
  Kind kind = Kind::Other;
  float f = 0;
  int64_t i = 0;
  std::string s;
  onebit::Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<const ConstantBranch> graph;  // Kind::Graph
};

// Named attributes with typed getters. A wrong kind is an error naming the
// attribute, expected and actual kind; the node context is added by callers.
class Attributes {
 public:
  void set(const std::string& name, Attribute a) { map_[name] = std::move(a); }
  bool has(const std::string& name) const { return map_.count(name) != 0; }
  const Attribute* find(const std::string& name) const;
  const std::map<std::string, Attribute>& all() const { return map_; }

  int64_t get_int(const std::string& name, int64_t dflt) const;
  int64_t get_int(const std::string& name) const;  // required
  float get_float(const std::string& name, float dflt) const;
  std::string get_string(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> dflt = {}) const;
  std::vector<float> get_floats(const std::string& name, std::vector<float> dflt = {}) const;
  const Tensor* get_tensor(const std::string& name) const;

 private:
  std::map<std::string, Attribute> map_;
};

// A Constant node's value from its attributes (value, value_float(s),
// value_int(s)); fails naming what it holds otherwise.
Tensor constant_node_value(const Attributes& a);

// A dim as declared in the file: a number, a symbolic name, or unknown.
struct Dim {
  int64_t value = -1;  // >= 0 when fixed
  std::string param;   // symbolic name, if any
};

struct Value {
  std::string name;
  DType dtype = DType::Undefined;  // declared; Undefined when the file says nothing
  bool has_shape = false;          // whether `dims` was declared
  std::vector<Dim> dims;
  std::optional<Tensor> constant;  // initializer, or result of constant folding
  int producer = -1;               // index of the node writing it, -1 for inputs/constants
  bool is_input = false;
  bool is_output = false;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" for ai.onnx
  int64_t opset = 0;   // version of `domain` imported by the model
  std::vector<int> inputs;   // value ids; -1 for an omitted optional input
  std::vector<int> outputs;  // value ids; -1 for an omitted optional output
  Attributes attrs;
};

class Graph {
 public:
  std::string path;  // file name, for errors
  int64_t ir_version = 0;
  std::string producer_name;
  std::string producer_version;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::map<std::string, std::string> metadata;  // the model's metadata_props
  std::vector<Value> values;
  std::vector<Node> nodes;  // topological order once validated
  std::vector<int> inputs;  // graph inputs that are not initializers
  std::vector<int> outputs;
  std::vector<std::shared_ptr<const void>> keep_alive;  // parsed model, mmaps
  struct Region {
    const uint8_t* data;
    uint64_t size;
  };
  std::vector<Region> mapped;  // read-only file mappings constants may view

  // By the ids nodes and values carry. -1 (an omitted optional input, "no
  // producer") must be checked by the caller; an id out of range is an Error
  // rather than a read outside the vector.
  Value& value(int v) {
    check_id(v, values.size(), "value");
    return values[static_cast<size_t>(v)];
  }
  const Value& value(int v) const {
    check_id(v, values.size(), "value");
    return values[static_cast<size_t>(v)];
  }
  Node& node(int n) {
    check_id(n, nodes.size(), "node");
    return nodes[static_cast<size_t>(n)];
  }
  const Node& node(int n) const {
    check_id(n, nodes.size(), "node");
    return nodes[static_cast<size_t>(n)];
  }

  int find_value(const std::string& name) const;  // -1 if absent
  int add_value(Value v);
  // Fresh value name based on `base` that no value uses yet.
  std::string unique_name(const std::string& base) const;

  // "model.onnx: node 'layers.0/MatMul' (MatMul)"
  std::string node_label(const Node& n) const;
  std::string node_label(int node) const { return node_label(nodes[static_cast<size_t>(node)]); }
  // "node 'layers.0/MatMul' (MatMul)", without the file, for use mid-sentence.
  std::string node_ref(const Node& n) const;

  // consumers[v] = nodes reading value v (each node once per input slot).
  std::vector<std::vector<int>> consumers() const;
  // Recompute Value::producer from the node list.
  void relink();

 private:
  static void check_id(int id, size_t size, const char* what) {
    if (id < 0 || static_cast<size_t>(id) >= size) id_out_of_range(id, size, what);
  }
  [[noreturn]] static void id_out_of_range(int id, size_t size, const char* what);
  mutable std::map<std::string, int> index_;
};

// The 1bit domain for fused nodes that passes create, and onnxruntime's
// contrib domain (whose Q/DQ are ai.onnx's).
inline constexpr const char* kOneBitDomain = "com.onebit";
inline constexpr const char* kMicrosoftDomain = "com.microsoft";

// Domain as written in errors: "ai.onnx" for the empty string.
std::string domain_name(const std::string& domain);

}  // namespace onebit
