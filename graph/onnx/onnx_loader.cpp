#include "graph/onnx/onnx_loader.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <limits.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/paths.h"
#include "graph/onnx/onnx_wire.h"
#include "graph/validate.h"

namespace onebit {

namespace {

namespace fs = std::filesystem;

constexpr const char* kMicrosoftDomain = "com.microsoft";

// Everything one load needs to resolve tensors: the file name for errors, the
// directory external data must stay inside, the mapped external files.
struct LoadState {
  std::string name;  // model file as given, for messages
  std::string dir;   // directory external data resolves against
  std::map<std::string, std::shared_ptr<MappedFile>> external;
  std::shared_ptr<const onnx::ModelProto> model;
  // The mapped .onnx file when loading from one, and where each
  // initializer's raw_data sits in it (graph/onnx_wire.h).
  std::shared_ptr<MappedFile> source;
  std::vector<RawDataRef> raw_refs;
};

uint64_t parse_u64(const std::string& s, const std::string& what) {
  if (s.empty() || s.size() > 20) fail("{} '{}' is not a non-negative integer", what, s);
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') fail("{} '{}' is not a non-negative integer", what, s);
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) fail("{} '{}' overflows 64 bits", what, s);
    v = v * 10 + d;
  }
  return v;
}

// Resolves `location` inside the model's directory (base/paths.h: no
// absolute path, no '..', the real path must stay inside).
std::shared_ptr<MappedFile> external_file(LoadState& st, const std::string& location) {
  auto it = st.external.find(location);
  if (it != st.external.end()) return it->second;
  const std::string real = resolve_inside(st.dir, location, "external data location");
  auto f = MappedFile::open(real);
  st.external.emplace(location, f);
  return f;
}

// Typed fields that do not hold the element type itself (int8 in int32_data,
// ...) are narrowed into a buffer of their own.
template <class Dst, class Src>
std::shared_ptr<Dst> convert_field(const Src& src, size_t n) {
  auto buf = std::shared_ptr<Dst>(new Dst[n ? n : 1], std::default_delete<Dst[]>());
  for (size_t i = 0; i < n; ++i) buf.get()[i] = static_cast<Dst>(src.Get(static_cast<int>(i)));
  return buf;
}

Tensor read_tensor_view(LoadState& st, const onnx::TensorProto& tp, const std::string& what,
                        const RawDataRef* in_file);

// One initializer or tensor attribute into a Tensor view. `what` names it;
// `in_file` says where its raw_data lies in the mapped source, if stripped.
// A view whose address does not suit its element type (raw_data and
// external data may sit at any offset; reading a float through it would be
// undefined) is copied into aligned storage once, here.
Tensor read_tensor(LoadState& st, const onnx::TensorProto& tp, const std::string& what,
                   const RawDataRef* in_file = nullptr) {
  Tensor t = read_tensor_view(st, tp, what, in_file);
  if (t.dtype() == DType::Bool && t.raw()) {
    // A bool is one byte that must be 0 or 1 to be read as bool; a file may
    // hold any byte: made canonical (nonzero = true) once, here.
    const auto* b = static_cast<const uint8_t*>(t.raw());
    bool canonical = true;
    for (int64_t i = 0; i < t.size() && canonical; ++i) canonical = b[i] <= 1;
    if (!canonical) {
      Tensor copy = with_context(what, [&] { return Tensor::allocate_uninit(DType::Bool, t.shape()); });
      auto* c = static_cast<uint8_t*>(copy.raw());
      for (int64_t i = 0; i < t.size(); ++i) c[i] = b[i] != 0;
      return copy;
    }
  }
  const int bits = dtype_bits(t.dtype());
  const size_t align = bits >= 16 ? static_cast<size_t>(bits / 8) : 1;
  if (!t.raw() || reinterpret_cast<uintptr_t>(t.raw()) % align == 0) return t;
  Tensor copy = with_context(what, [&] { return Tensor::allocate_uninit(t.dtype(), t.shape()); });
  // The copy stands for mapped bytes from then on: their pages go back to
  // the page cache as each 16 MiB is copied, so a 622 MB embedding at an
  // odd offset counts once in the process's memory, not twice (copied and
  // mapped), at the end of the load or in its middle.
  const auto* p = static_cast<const uint8_t*>(t.raw());
  const auto inside = [&](const MappedFile* f) { return f && range_inside(p, t.bytes(), f->data(), f->size()); };
  bool mapped = inside(st.source.get());
  for (const auto& [location, f] : st.external) mapped = mapped || inside(f.get());
  constexpr size_t kChunk = size_t{16} << 20;
  const uint8_t* released = p;  // the pages before it are back (from its page on when aligned)
  for (size_t at = 0; at < t.bytes(); at += kChunk) {
    const size_t n = std::min(kChunk, t.bytes() - at);
    std::memcpy(static_cast<uint8_t*>(copy.raw()) + at, p + at, n);
    if (mapped)
      released = static_cast<const uint8_t*>(release_pages(released, static_cast<size_t>(p + at + n - released)));
  }
  return copy;
}

Tensor read_tensor_view(LoadState& st, const onnx::TensorProto& tp, const std::string& what,
                        const RawDataRef* in_file) {
  return with_context(what, [&]() -> Tensor {
    const int32_t type = tp.data_type();
    if (!dtype_supported(type)) {
      if (type == static_cast<int32_t>(DType::String)) fail("string tensors are not supported");
      fail("unsupported data type {}", type);
    }
    const DType dtype = static_cast<DType>(type);
    Shape shape;
    for (int i = 0; i < tp.dims_size(); ++i) {
      const int64_t d = tp.dims(i);
      if (d < 0) fail("dim {} is negative ({})", i, d);
      shape.push_back(d);
    }
    const int64_t count = checked_numel(shape);
    if (count < 0) fail("shape {} overflows", shape_str(shape));
    // Bytes the shape needs, checked against overflow before anything reads.
    if (static_cast<uint64_t>(count) > (UINT64_MAX / 8)) fail("shape {} is too large", shape_str(shape));
    const uint64_t need = dtype_bytes(dtype, count);
    auto sized = [&](const char* source, uint64_t have) {
      if (have != need)
        fail("shape {} of {} needs {} bytes, {} holds {}", shape_str(shape), dtype_name(dtype), need, source, have);
    };

    if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
      std::string location;
      uint64_t offset = 0, length = 0;
      bool has_length = false;
      for (const auto& kv : tp.external_data()) {
        if (kv.key() == "location") location = kv.value();
        else if (kv.key() == "offset") offset = parse_u64(kv.value(), "external data offset");
        else if (kv.key() == "length") {
          length = parse_u64(kv.value(), "external data length");
          has_length = true;
        }
      }
      if (location.empty()) fail("external data has no 'location'");
      auto file = external_file(st, location);
      if (offset > file->size())
        fail("external data offset {} is past the end of '{}' ({} bytes)", offset, location, file->size());
      const uint64_t avail = file->size() - offset;
      if (!has_length) length = avail;
      if (length > avail)
        fail("external data '{}' offset {} + length {} exceeds the file's {} bytes", location, offset, length,
             file->size());
      sized("external data", length);
      void* p = const_cast<uint8_t*>(file->data()) + offset;
      return Tensor(dtype, shape, need ? p : nullptr, file);
    }

    auto model = std::static_pointer_cast<const void>(st.model);
    if (in_file && in_file->present) {
      sized("raw_data", in_file->size);
      return Tensor(dtype, shape, const_cast<uint8_t*>(st.source->data() + in_file->offset), st.source);
    }
    if (tp.has_raw_data()) {
      sized("raw_data", tp.raw_data().size());
      return Tensor(dtype, shape, const_cast<char*>(tp.raw_data().data()), model);
    }
    switch (dtype) {
      case DType::F32:
        sized("float_data", uint64_t(tp.float_data_size()) * 4);
        return Tensor(dtype, shape, const_cast<float*>(tp.float_data().data()), model);
      case DType::F64:
        sized("double_data", uint64_t(tp.double_data_size()) * 8);
        return Tensor(dtype, shape, const_cast<double*>(tp.double_data().data()), model);
      case DType::I64:
        sized("int64_data", uint64_t(tp.int64_data_size()) * 8);
        return Tensor(dtype, shape, const_cast<int64_t*>(tp.int64_data().data()), model);
      case DType::I32:
        sized("int32_data", uint64_t(tp.int32_data_size()) * 4);
        return Tensor(dtype, shape, const_cast<int32_t*>(tp.int32_data().data()), model);
      case DType::U64:
        sized("uint64_data", uint64_t(tp.uint64_data_size()) * 8);
        return Tensor(dtype, shape, const_cast<uint64_t*>(tp.uint64_data().data()), model);
      case DType::U32: {
        sized("uint64_data", uint64_t(tp.uint64_data_size()) * 4);
        auto buf = convert_field<uint32_t>(tp.uint64_data(), size_t(count));
        return Tensor(dtype, shape, buf.get(), buf);
      }
      case DType::I4:
      case DType::U4: {
        // int32_data holds one packed byte (two nibbles) per element.
        sized("int32_data", uint64_t(tp.int32_data_size()));
        auto buf = convert_field<uint8_t>(tp.int32_data(), need);
        return Tensor(dtype, shape, buf.get(), buf);
      }
      case DType::I8:
      case DType::U8:
      case DType::Bool: {
        sized("int32_data", uint64_t(tp.int32_data_size()));
        auto buf = convert_field<uint8_t>(tp.int32_data(), size_t(count));
        return Tensor(dtype, shape, buf.get(), buf);
      }
      case DType::I16:
      case DType::U16:
      case DType::F16:
      case DType::BF16: {
        sized("int32_data", uint64_t(tp.int32_data_size()) * 2);
        auto buf = convert_field<uint16_t>(tp.int32_data(), size_t(count));
        return Tensor(dtype, shape, buf.get(), buf);
      }
      default: fail("data type {} has no typed field", dtype_name(dtype));
    }
  });
}

Attribute read_attribute(LoadState& st, const onnx::AttributeProto& ap, const std::string& what);

// A subgraph (If's then_branch / else_branch): its outputs when each is a
// constant it defines (ConstantBranch); else the first thing that is not.
std::shared_ptr<const ConstantBranch> read_branch(LoadState& st, const onnx::GraphProto& gp, const std::string& what) {
  auto b = std::make_shared<ConstantBranch>();
  for (const auto& o : gp.output()) b->names.push_back(o.name());
  if (gp.input_size() > 0) {
    b->not_constant = fmt::format("it declares {} input(s)", gp.input_size());
    return b;
  }
  std::map<std::string, Tensor> known;
  for (const auto& init : gp.initializer())
    known[init.name()] = read_tensor(st, init, fmt::format("{} initializer '{}'", what, init.name()));
  for (const auto& np : gp.node()) {
    const bool constant =
        np.op_type() == "Constant" && (np.domain().empty() || np.domain() == "ai.onnx") && np.output_size() == 1;
    if (!constant) {
      b->not_constant = fmt::format("its node '{}' is {} (only Constant nodes are taken)", np.name(), np.op_type());
      return b;
    }
    const std::string label = fmt::format("{} node '{}'", what, np.name());
    Attributes attrs;
    for (const auto& ap : np.attribute()) attrs.set(ap.name(), read_attribute(st, ap, label));
    Tensor t;
    try {
      t = constant_node_value(attrs);
    } catch (const Error& e) {
      b->not_constant = fmt::format("its Constant node '{}': {}", np.name(), e.what());
      return b;
    }
    known[np.output(0)] = std::move(t);
  }
  for (const std::string& name : b->names) {
    const auto it = known.find(name);
    if (it == known.end()) {
      b->not_constant = fmt::format("its output '{}' is not a constant it defines", name);
      b->outputs.clear();
      return b;
    }
    b->outputs.push_back(it->second);
  }
  return b;
}

Attribute read_attribute(LoadState& st, const onnx::AttributeProto& ap, const std::string& what) {
  Attribute a;
  using AP = onnx::AttributeProto;
  switch (ap.type()) {
    case AP::FLOAT: a.kind = Attribute::Kind::Float; a.f = ap.f(); break;
    case AP::INT: a.kind = Attribute::Kind::Int; a.i = ap.i(); break;
    case AP::STRING: a.kind = Attribute::Kind::String; a.s = ap.s(); break;
    case AP::TENSOR:
      a.kind = Attribute::Kind::Tensor;
      a.t = read_tensor(st, ap.t(), what + " attribute '" + ap.name() + "'");
      break;
    case AP::GRAPH:
      a.kind = Attribute::Kind::Graph;
      a.graph = read_branch(st, ap.g(), what + " attribute '" + ap.name() + "'");
      break;
    case AP::FLOATS:
      a.kind = Attribute::Kind::Floats;
      a.floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case AP::INTS:
      a.kind = Attribute::Kind::Ints;
      a.ints.assign(ap.ints().begin(), ap.ints().end());
      break;
    case AP::STRINGS:
      a.kind = Attribute::Kind::Strings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      break;
    default: a.kind = Attribute::Kind::Other; break;
  }
  return a;
}

void read_type(const onnx::ValueInfoProto& vi, Value& v) {
  if (!vi.has_type() || !vi.type().has_tensor_type()) return;
  const auto& tt = vi.type().tensor_type();
  if (tt.has_elem_type()) {
    const int32_t t = tt.elem_type();
    if (t != 0 && !dtype_supported(t)) fail("value '{}' has unsupported data type {}", vi.name(), t);
    v.dtype = static_cast<DType>(t);
  }
  if (tt.has_shape()) {
    v.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      Dim dim;
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) fail("value '{}' declares a negative dim ({})", vi.name(), d.dim_value());
        dim.value = d.dim_value();
      } else if (d.has_dim_param()) {
        dim.param = d.dim_param();
      }
      v.dims.push_back(dim);
    }
  }
}

Graph build_graph(LoadState& st, const LoadOptions& opt) {
  const onnx::ModelProto& mp = *st.model;
  Graph g;
  g.path = st.name;
  g.ir_version = mp.ir_version();
  g.producer_name = mp.producer_name();
  g.producer_version = mp.producer_version();
  if (!mp.has_graph()) fail("{}: not an ONNX model (no graph; is the file truncated or not .onnx?)", st.name);
  if (mp.ir_version() <= 0) fail("{}: not an ONNX model (ir_version {})", st.name, mp.ir_version());

  for (const auto& kv : mp.metadata_props()) g.metadata[kv.key()] = kv.value();
  for (const auto& os : mp.opset_import()) {
    std::string domain = os.domain() == "ai.onnx" ? "" : os.domain();
    g.opsets[domain] = os.version();
  }
  if (!g.opsets.count("")) fail("{}: the model imports no ai.onnx opset", st.name);
  for (const auto& [domain, version] : g.opsets) {
    if (domain.empty()) {
      if (version < opt.min_opset || version > opt.max_opset)
        fail("{}: opset ai.onnx {} is not supported (1bit implements {} to {})", st.name, version, opt.min_opset,
             opt.max_opset);
    }
    // Other domains (com.microsoft and custom ones) load; their ops resolve
    // or become placeholders at session creation.
  }

  const onnx::GraphProto& gp = mp.graph();
  auto define = [&](const std::string& name, const char* by) -> int {
    if (name.empty()) fail("{}: {} defines a value with an empty name", st.name, by);
    if (g.find_value(name) >= 0) fail("{}: value '{}' is defined twice ({})", st.name, name, by);
    Value v;
    v.name = name;
    return g.add_value(std::move(v));
  };

  for (int i = 0; i < gp.initializer_size(); ++i) {
    const onnx::TensorProto& init = gp.initializer(i);
    const int id = define(init.name(), "initializer");
    Value& v = g.value(id);
    const RawDataRef* ref = static_cast<size_t>(i) < st.raw_refs.size() ? &st.raw_refs[static_cast<size_t>(i)] : nullptr;
    v.constant = read_tensor(st, init, st.name + ": initializer '" + init.name() + "'", ref);
    v.dtype = v.constant->dtype();
    v.has_shape = true;
    for (int64_t d : v.constant->shape()) v.dims.push_back(Dim{d, {}});
  }
  if (gp.sparse_initializer_size() > 0)
    fail("{}: sparse initializers are not supported ('{}')", st.name, gp.sparse_initializer(0).values().name());

  for (const auto& in : gp.input()) {
    int id = g.find_value(in.name());
    if (id >= 0 && g.value(id).constant) continue;  // IR < 4 lists initializers as inputs
    id = define(in.name(), "graph input");
    Value& v = g.value(id);
    with_context(st.name, [&] { read_type(in, v); });
    v.is_input = true;
    g.inputs.push_back(id);
  }

  std::map<std::string, const onnx::ValueInfoProto*> declared;
  for (const auto& vi : gp.value_info()) declared[vi.name()] = &vi;
  for (const auto& vi : gp.output()) declared[vi.name()] = &vi;

  std::set<std::string> used_names;
  for (int n = 0; n < gp.node_size(); ++n) {
    const onnx::NodeProto& np = gp.node(n);
    Node node;
    node.op_type = np.op_type();
    node.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    node.name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), n) : np.name();
    if (!used_names.insert(node.name).second) node.name = fmt::format("{}#{}", node.name, n);
    const std::string label = g.node_label(node);
    // com.onebit is what 1bit's passes write; its kernels trust what the
    // pass that wrote them checked (a KV state's head stride, a verified
    // repeat), so a file may not name them.
    if (node.domain == kOneBitDomain)
      fail("{}: domain '{}' is 1bit's own, for the nodes its passes write; a model file cannot use it", label,
           node.domain);
    auto opset_it = g.opsets.find(node.domain);
    if (opset_it == g.opsets.end()) {
      // Q/DQ in com.microsoft are accepted without an explicit import.
      if (node.domain != kMicrosoftDomain)
        fail("{}: domain '{}' is used but not imported by the model", label, node.domain);
      node.opset = 1;
    } else {
      node.opset = opset_it->second;
    }
    for (const auto& ap : np.attribute()) node.attrs.set(ap.name(), read_attribute(st, ap, label));
    for (const auto& name : np.input()) {
      if (name.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      // Forward references are resolved by validate(); record by name now.
      int id = g.find_value(name);
      if (id < 0) {
        Value v;
        v.name = name;
        id = g.add_value(std::move(v));
      }
      node.inputs.push_back(id);
    }
    for (const auto& name : np.output()) {
      if (name.empty()) {
        node.outputs.push_back(-1);
        continue;
      }
      int id = g.find_value(name);
      if (id < 0) {
        Value v;
        v.name = name;
        id = g.add_value(std::move(v));
      }
      Value& v = g.value(id);
      if (v.constant || v.is_input) fail("{}: writes '{}', which is already a graph input or initializer", label, name);
      if (v.producer == static_cast<int>(g.nodes.size())) fail("{}: writes '{}' twice", label, name);
      if (v.producer >= 0)
        fail("{}: writes '{}', which {} also writes", label, name, g.node_ref(g.node(v.producer)));
      v.producer = static_cast<int>(g.nodes.size());
      auto d = declared.find(name);
      if (d != declared.end()) with_context(st.name, [&] { read_type(*d->second, v); });
      node.outputs.push_back(id);
    }
    // Every op's first output is required; the passes and the planner rely on it.
    if (node.outputs.empty() || node.outputs[0] < 0) fail("{}: has no first output", label);
    g.nodes.push_back(std::move(node));
  }

  for (const auto& out : gp.output()) {
    const int id = g.find_value(out.name());
    if (id < 0) fail("{}: graph output '{}' is not produced by any node, input or initializer", st.name, out.name());
    Value& v = g.value(id);
    if (v.dtype == DType::Undefined) with_context(st.name, [&] { read_type(out, v); });
    v.is_output = true;
    g.outputs.push_back(id);
  }
  return g;
}

}  // namespace

namespace {

Graph load_from(const void* data, size_t size, const std::string& name, const std::string& dir,
                const LoadOptions& options, std::shared_ptr<MappedFile> source) {
  if (size == 0) fail("{}: the file is empty", name);
  if (size > options.max_model_bytes)
    fail("{}: the file is {} bytes, over the parse limit of {} bytes (models over 2 GB keep weights in external data)",
         name, size, options.max_model_bytes);
  LoadState st;
  st.name = name;
  st.dir = dir.empty() ? "." : dir;
  st.source = source;
  // From a mapped file, embedded weights stay in the file (onnx_wire.h):
  // protobuf parses a copy with their payloads cut out.
  StrippedModel stripped;
  if (source) {
    stripped = strip_initializer_data(static_cast<const uint8_t*>(data), size, name);
    data = stripped.bytes.data();
    size = stripped.bytes.size();
    st.raw_refs = std::move(stripped.initializers);
  }
  auto model = std::make_shared<onnx::ModelProto>();
  google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(static_cast<int>(std::min<uint64_t>(options.max_model_bytes, INT_MAX)));
  if (!model->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    fail("{}: not a valid ONNX model (protobuf parsing failed after {} of {} bytes; truncated or not .onnx?)", name,
         coded.CurrentPosition(), size);
  st.model = model;
  Graph g = build_graph(st, options);
  g.keep_alive.push_back(model);
  if (source) {
    g.keep_alive.push_back(source);
    g.mapped.push_back({source->data(), source->size()});
  }
  for (const auto& [loc, f] : st.external) g.mapped.push_back({f->data(), f->size()});
  validate(g);
  return g;
}

}  // namespace

Graph load_onnx_bytes(const void* data, size_t size, const std::string& name, const std::string& dir,
                      const LoadOptions& options) {
  return load_from(data, size, name, dir, options, nullptr);
}

Tensor load_tensor_file(const std::string& path, std::string* name) {
  auto file = MappedFile::open(path);
  auto proto = std::make_shared<onnx::TensorProto>();
  google::protobuf::io::ArrayInputStream raw(file->data(), static_cast<int>(file->size()));
  google::protobuf::io::CodedInputStream coded(&raw);
  if (!proto->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    fail("{}: not a serialized TensorProto", path);
  LoadState st;
  st.name = path;
  st.dir = fs::path(path).parent_path().string();
  // read_tensor keeps views alive through st.model; hold the TensorProto there.
  auto holder = std::make_shared<onnx::ModelProto>();
  st.model = holder;
  Tensor view = read_tensor(st, *proto, path + ": tensor '" + proto->name() + "'");
  if (name) *name = proto->name();
  return Tensor::clone(view);
}

Graph load_onnx(const std::string& path, const LoadOptions& options) {
  auto file = MappedFile::open(path);
  const std::string dir = fs::path(path).parent_path().string();
  if (file->size() > options.max_model_bytes)
    fail("{}: the file is {} bytes, over the parse limit of {} bytes (models over 2 GB keep weights in external data)",
         path, file->size(), options.max_model_bytes);
  return load_from(file->data(), file->size(), path, dir, options, file);
}

}  // namespace onebit
