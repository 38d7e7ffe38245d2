// Test helpers for single ops: build a one-node Graph in code, run it through
// a Session (passes, planning, arena and all) and read the outputs back.
//
//   auto y = OpTest("Softmax", 21).attr("axis", -1).input(make_tensor<float>({2, 3}, {...})).run();
//   CHECK(values<float>(y[0]) == std::vector<float>{...});
//
// Inputs are graph inputs by default, so the kernel runs on the session's
// normal path (arena-backed outputs); `constant()` makes an input an
// initializer instead (plan-time evaluation, kernels that read the value in
// reshape), and `omit()` leaves an optional input out.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "graph/graph.h"
#include "graph/session.h"
#include "graph/tensor.h"
#include "graph/validate.h"
#include "ops/register_ops.h"

namespace onebit::test {

// A tensor of dtype_of<T>() holding `v` (bool, any byte-addressable type,
// Half/BFloat16 by bits).
template <class T>
Tensor make_tensor(Shape shape, const std::vector<T>& v) {
  Tensor t = Tensor::allocate(dtype_of<T>(), std::move(shape));
  if (static_cast<int64_t>(v.size()) != t.size())
    throw Error("make_tensor: " + std::to_string(v.size()) + " values for shape " + shape_str(t.shape()));
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}

// A tensor of any supported dtype from doubles: floats round to nearest even,
// integers are converted with static_cast (values must fit), 4-bit types are
// packed low nibble first, bool is v != 0.
inline Tensor make_tensor_as(DType dtype, Shape shape, const std::vector<double>& v) {
  Tensor t = Tensor::allocate(dtype, std::move(shape));
  if (static_cast<int64_t>(v.size()) != t.size())
    throw Error("make_tensor_as: " + std::to_string(v.size()) + " values for shape " + shape_str(t.shape()));
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = static_cast<float>(x); break;
      case DType::F64: t.data<double>()[i] = x; break;
      case DType::F16: t.data<uint16_t>()[i] = float_to_half(static_cast<float>(x)); break;
      case DType::BF16: t.data<uint16_t>()[i] = float_to_bfloat16(static_cast<float>(x)); break;
      case DType::I8: t.data<int8_t>()[i] = static_cast<int8_t>(x); break;
      case DType::U8: t.data<uint8_t>()[i] = static_cast<uint8_t>(x); break;
      case DType::I16: t.data<int16_t>()[i] = static_cast<int16_t>(x); break;
      case DType::U16: t.data<uint16_t>()[i] = static_cast<uint16_t>(x); break;
      case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(x); break;
      case DType::U32: t.data<uint32_t>()[i] = static_cast<uint32_t>(x); break;
      case DType::I64: t.data<int64_t>()[i] = static_cast<int64_t>(x); break;
      case DType::U64: t.data<uint64_t>()[i] = static_cast<uint64_t>(x); break;
      case DType::Bool: t.data<bool>()[i] = x != 0; break;
      case DType::I4:
      case DType::U4: {
        uint8_t& b = t.data<uint8_t>()[i / 2];
        const unsigned nib = static_cast<unsigned>(static_cast<int>(x)) & 0x0Fu;
        b = static_cast<uint8_t>((i % 2) ? ((b & 0x0F) | (nib << 4)) : ((b & 0xF0) | nib));
        break;
      }
      default: throw Error("make_tensor_as: unsupported dtype " + std::string(dtype_name(dtype)));
    }
  }
  return t;
}

// Every element of `t` as a double (4-bit types unpacked, 16-bit floats widened).
inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) {
    if (t.dtype() == DType::I4 || t.dtype() == DType::U4) {
      const uint8_t b = t.data<uint8_t>()[i / 2];
      int v = (i % 2) ? (b >> 4) : (b & 0x0F);
      if (t.dtype() == DType::I4) v = (v ^ 8) - 8;
      out[static_cast<size_t>(i)] = v;
    } else {
      out[static_cast<size_t>(i)] = tensor_double_at(t, i);
    }
  }
  return out;
}

// The elements of `t` as T; T must be its storage type.
template <class T>
std::vector<T> values(const Tensor& t) {
  if (dtype_of<T>() != t.dtype())
    throw Error("values<T>: tensor is " + std::string(dtype_name(t.dtype())) + ", asked for " +
                std::string(dtype_name(dtype_of<T>())));
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.size());
}

// Whether a and b agree elementwise within |a-b| <= atol + rtol*|b|, NaNs
// matching NaNs and infinities matching exactly.
inline bool all_close(const std::vector<double>& a, const std::vector<double>& b, double rtol = 1e-6,
                      double atol = 1e-7) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (!(std::isnan(a[i]) && std::isnan(b[i]))) return false;
      continue;
    }
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return false;
      continue;
    }
    if (std::fabs(a[i] - b[i]) > atol + rtol * std::fabs(b[i])) return false;
  }
  return true;
}

class OpTest {
 public:
  explicit OpTest(std::string op_type, int64_t opset = 21, std::string domain = "")
      : op_type_(std::move(op_type)), domain_(std::move(domain)), opset_(opset) {}

  OpTest& attr(const std::string& name, int64_t v) {
    Attribute a;
    a.kind = Attribute::Kind::Int;
    a.i = v;
    attrs_.set(name, std::move(a));
    return *this;
  }
  OpTest& attr(const std::string& name, int v) { return attr(name, static_cast<int64_t>(v)); }
  OpTest& attr(const std::string& name, float v) {
    Attribute a;
    a.kind = Attribute::Kind::Float;
    a.f = v;
    attrs_.set(name, std::move(a));
    return *this;
  }
  OpTest& attr(const std::string& name, const char* v) { return attr(name, std::string(v)); }
  OpTest& attr(const std::string& name, std::string v) {
    Attribute a;
    a.kind = Attribute::Kind::String;
    a.s = std::move(v);
    attrs_.set(name, std::move(a));
    return *this;
  }
  OpTest& attr(const std::string& name, std::vector<int64_t> v) {
    Attribute a;
    a.kind = Attribute::Kind::Ints;
    a.ints = std::move(v);
    attrs_.set(name, std::move(a));
    return *this;
  }
  OpTest& attr(const std::string& name, std::vector<float> v) {
    Attribute a;
    a.kind = Attribute::Kind::Floats;
    a.floats = std::move(v);
    attrs_.set(name, std::move(a));
    return *this;
  }

  // The next input, fed at run time.
  OpTest& input(Tensor t) {
    inputs_.push_back({std::move(t), Slot::Kind::Runtime});
    return *this;
  }
  // The next input, as an initializer.
  OpTest& constant(Tensor t) {
    inputs_.push_back({std::move(t), Slot::Kind::Constant});
    return *this;
  }
  // The next (optional) input, left out.
  OpTest& omit() {
    inputs_.push_back({Tensor(), Slot::Kind::Omitted});
    return *this;
  }
  // Number of outputs the node declares; `omit_output(i)` leaves output i out.
  OpTest& outputs(int n) {
    num_outputs_ = n;
    return *this;
  }
  OpTest& omit_output(int i) {
    omitted_outputs_.push_back(i);
    return *this;
  }
  OpTest& threads(int n) {
    options_.threads = n;
    return *this;
  }
  OpTest& act_precision(ActPrecision a) {
    options_.kernel.act_precision = a;
    return *this;
  }
  // Folding and the QDQ fusion only (SessionOptions::basic): the op as the
  // file has it, without the fusions that replace it.
  OpTest& basic() {
    options_.basic = true;
    return *this;
  }

  // The one-node graph this test describes.
  Graph graph() const {
    Graph g;
    g.path = "test:" + op_type_;
    g.opsets[""] = domain_.empty() ? opset_ : 21;
    if (!domain_.empty()) g.opsets[domain_] = opset_;
    Node node;
    node.name = op_type_ + "_node";
    node.op_type = op_type_;
    node.domain = domain_;
    node.opset = opset_;
    node.attrs = attrs_;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Slot& s = inputs_[i];
      if (s.kind == Slot::Kind::Omitted) {
        node.inputs.push_back(-1);
        continue;
      }
      Value v;
      v.name = "in" + std::to_string(i);
      v.dtype = s.tensor.dtype();
      if (s.kind == Slot::Kind::Constant) {
        v.constant = s.tensor;
      } else {
        v.is_input = true;
      }
      const int id = g.add_value(std::move(v));
      if (s.kind == Slot::Kind::Runtime) g.inputs.push_back(id);
      node.inputs.push_back(id);
    }
    for (int o = 0; o < num_outputs_; ++o) {
      bool omitted = false;
      for (int x : omitted_outputs_) omitted |= x == o;
      if (omitted) {
        node.outputs.push_back(-1);
        continue;
      }
      Value v;
      v.name = "out" + std::to_string(o);
      v.is_output = true;
      const int id = g.add_value(std::move(v));
      g.outputs.push_back(id);
      node.outputs.push_back(id);
    }
    g.nodes.push_back(std::move(node));
    validate(g);
    return g;
  }

  // Runs the node; returns the outputs that are not omitted, in order.
  std::vector<Tensor> run(int times = 1) const {
    Session session(graph(), default_op_registry(), options_);
    std::vector<NamedTensor> feeds;
    for (size_t i = 0; i < inputs_.size(); ++i)
      if (inputs_[i].kind == Slot::Kind::Runtime) feeds.push_back({"in" + std::to_string(i), inputs_[i].tensor});
    std::vector<Tensor> out;
    for (int t = 0; t < times; ++t) out = session.run(feeds);
    return out;
  }

  // The first output.
  Tensor run1() const { return run().at(0); }

 private:
  struct Slot {
    enum class Kind { Runtime, Constant, Omitted };
    Tensor tensor;
    Kind kind;
  };
  std::string op_type_;
  std::string domain_;
  int64_t opset_;
  Attributes attrs_;
  std::vector<Slot> inputs_;
  int num_outputs_ = 1;
  std::vector<int> omitted_outputs_;
  SessionOptions options_;
};

}  // namespace onebit::test
