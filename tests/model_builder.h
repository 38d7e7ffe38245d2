// Builds ONNX model files in tests, valid or deliberately broken, through the
// protobuf classes (tests may see protobuf; the runtime past the loader never
// does).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace onebit::test {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 21) {
    model_.set_ir_version(10);
    model_.set_producer_name("1bit-tests");
    auto* os = model_.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  onnx::ModelProto& proto() { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

  // dims: -1 for a symbolic dim named `sym` + index.
  ModelBuilder& input(const std::string& name, int32_t dtype, const std::vector<int64_t>& dims) {
    value_info(graph().add_input(), name, dtype, dims);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int32_t dtype, const std::vector<int64_t>& dims) {
    value_info(graph().add_output(), name, dtype, dims);
    return *this;
  }
  // Names symbolic dim `axis` of graph input or output `value` `param`
  // (input() and output() name a -1 dim "sym" + its index).
  ModelBuilder& dim_param(const std::string& value, int axis, const std::string& param) {
    for (auto* list : {graph().mutable_input(), graph().mutable_output()})
      for (auto& vi : *list)
        if (vi.name() == value)
          vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(axis)->set_dim_param(param);
    return *this;
  }
  // Declares an intermediate value's dtype and dims (value_info).
  ModelBuilder& declare(const std::string& name, int32_t dtype, const std::vector<int64_t>& dims) {
    value_info(graph().add_value_info(), name, dtype, dims);
    return *this;
  }
  onnx::TensorProto& initializer(const std::string& name, int32_t dtype, const std::vector<int64_t>& dims,
                                 const void* data, size_t bytes) {
    onnx::TensorProto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(dtype);
    for (int64_t d : dims) t->add_dims(d);
    if (data) t->set_raw_data(data, bytes);
    return *t;
  }
  template <class T>
  onnx::TensorProto& initializer(const std::string& name, int32_t dtype, const std::vector<int64_t>& dims,
                                 const std::vector<T>& values) {
    return initializer(name, dtype, dims, values.data(), values.size() * sizeof(T));
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size()) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }
  static void attr_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void external(onnx::TensorProto& t, const std::string& location, const std::string& offset,
                       const std::string& length) {
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
      if (v.empty()) return;
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", location);
    kv("offset", offset);
    kv("length", length);
  }

  std::string bytes() const { return model_.SerializeAsString(); }
  void save(const std::string& path) const { write_file(path, bytes()); }

  static void write_file(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }

 private:
  static void value_info(onnx::ValueInfoProto* vi, const std::string& name, int32_t dtype,
                         const std::vector<int64_t>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtype);
    auto* shape = tt->mutable_shape();
    for (size_t i = 0; i < dims.size(); ++i) {
      auto* d = shape->add_dim();
      if (dims[i] >= 0) d->set_dim_value(dims[i]);
      else d->set_dim_param("sym" + std::to_string(i));
    }
  }
  onnx::ModelProto model_;
};

// A fresh empty directory under the build tree for one test's files, in a
// folder of this process's own: ctest runs each case of a binary as its own
// process, in parallel, and two cases may choose the same name. The folder
// is removed when the process exits normally.
inline std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  struct ProcessFolder {
    fs::path path = fs::path(ONEBIT_BINARY_DIR) / "test-scratch" / ("pid" + std::to_string(::getpid()));
    ~ProcessFolder() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  };
  static const ProcessFolder folder;
  fs::path p = folder.path / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace onebit::test
