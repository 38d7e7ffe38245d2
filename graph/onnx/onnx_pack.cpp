// The file-level Q4NX rewrite (graph/onnx_pack.h). The ModelProto is parsed
// with large embedded payloads cut out (graph/onnx_wire.h), edited in place,
// and written back with every tensor's bytes taken from the loaded IR (file
// views) or from the quantizer.
#include "graph/onnx/onnx_pack.h"

#include <fnmatch.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <limits.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/mapped_file.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/onnx/onnx_wire.h"

namespace onebit {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kPackOpset = 21;    // int4 DequantizeLinear with block_size
constexpr int64_t kPackIrVersion = 10;  // int4 / uint4 tensors
constexpr uint64_t kExternalMinBytes = 1024;  // onnx's default size_threshold
constexpr uint64_t kAlignAbove = 64 * 1024;   // larger tensors start page-aligned (as scripts/export_onnx.py)
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kInlineLimit = 1800ull * 1000 * 1000;  // under protobuf's 2 GiB, as the exporter

bool is_onnx_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string node_desc(const onnx::NodeProto& n, int index) {
  return fmt::format("node '{}' ({})", n.name().empty() ? fmt::format("#{}", index) : n.name(), n.op_type());
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

// One MatMul to rewrite.
struct Candidate {
  int node = -1;
  std::string src;  // the float initializer
  bool transposed = false;
  int transpose_node = -1;
};

// One quantized weight (a source initializer, read straight or transposed).
struct Packed {
  std::string src;
  bool transposed = false;
  std::string codes_name, scale_name, zero_name;
  Q4Quantized q;
};

// A tensor of the output and where its bytes come from.
struct OutTensor {
  onnx::TensorProto proto;  // without data, unless `verbatim`
  const void* data = nullptr;
  uint64_t bytes = 0;
  bool verbatim = false;
};

class NameSet {
 public:
  void add(const std::string& s) { names_.insert(s); }
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; names_.count(name); ++i) name = fmt::format("{}.{}", base, i);
    names_.insert(name);
    return name;
  }

 private:
  std::set<std::string> names_;
};

std::unique_ptr<onnx::ModelProto> parse_stripped(const MappedFile& file, std::vector<RawDataRef>& refs) {
  StrippedModel stripped = strip_initializer_data(file.data(), file.size(), file.path());
  refs = std::move(stripped.initializers);
  auto model = std::make_unique<onnx::ModelProto>();
  google::protobuf::io::ArrayInputStream raw(stripped.bytes.data(), static_cast<int>(stripped.bytes.size()));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  if (!model->ParseFromCodedStream(&coded)) fail("{}: not a valid ONNX model (protobuf parsing failed)", file.path());
  return model;
}

void set_tensor_header(onnx::TensorProto& t, const std::string& name, int32_t dtype, std::vector<int64_t> dims) {
  t.set_name(name);
  t.set_data_type(dtype);
  for (int64_t d : dims) t.add_dims(d);
}

// ai.onnx → 21 when lower. Between 18 and 21 the ops change only by new
// types or attributes with the old meaning as default, except
// GroupNormalization (its scale went per channel at 21); 17 → 18 moved the
// Reduce* axes from attribute to input, so 17 is refused.
bool raise_opset(onnx::ModelProto& m, const std::string& path) {
  onnx::OperatorSetIdProto* onnx_opset = nullptr;
  for (auto& os : *m.mutable_opset_import())
    if (is_onnx_domain(os.domain())) onnx_opset = &os;
  if (!onnx_opset) fail("{}: the model imports no ai.onnx opset", path);
  if (onnx_opset->version() >= kPackOpset) return false;
  if (onnx_opset->version() < 18)
    fail("{}: imports ai.onnx {}; int4 DequantizeLinear needs opset 21 and raising it from below 18 would change "
         "the meaning of Reduce* nodes (axes moved to an input at 18); re-export at opset 18 or later",
         path, onnx_opset->version());
  for (int i = 0; i < m.graph().node_size(); ++i)
    if (m.graph().node(i).op_type() == "GroupNormalization" && is_onnx_domain(m.graph().node(i).domain()))
      fail("{}: {} would change meaning when the opset is raised from {} to 21 (per-channel scale); re-export at "
           "opset 21",
           path, node_desc(m.graph().node(i), i), onnx_opset->version());
  onnx_opset->set_version(kPackOpset);
  return true;
}

}  // namespace

bool pack_name_matches(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

PackResult pack_onnx(const std::string& in, const std::string& out, const PackOptions& opt) {
  const Q4QuantizeOptions& qo = opt.quant;
  if (qo.block_size && (qo.block_size < 16 || (qo.block_size & (qo.block_size - 1))))
    fail("block size {} is not a power of two of at least 16 (16, 32, 64, 128, 256, ...)", qo.block_size);
  if (fs::exists(out) && fs::equivalent(in, out)) fail("{}: the output would overwrite the input", out);

  const Graph g = load_onnx(in);  // validated; tensors view the files
  auto file = MappedFile::open(in);
  std::vector<RawDataRef> refs;
  std::unique_ptr<onnx::ModelProto> model = parse_stripped(*file, refs);
  onnx::GraphProto& gp = *model->mutable_graph();

  std::map<std::string, int> init_index, producer;
  std::set<std::string> graph_inputs, graph_outputs;
  NameSet names;
  for (int i = 0; i < gp.initializer_size(); ++i) {
    init_index[gp.initializer(i).name()] = i;
    names.add(gp.initializer(i).name());
  }
  for (const auto& v : gp.input()) {
    graph_inputs.insert(v.name());
    names.add(v.name());
  }
  for (const auto& v : gp.output()) {
    graph_outputs.insert(v.name());
    names.add(v.name());
  }
  for (const auto& v : gp.value_info()) names.add(v.name());
  for (int i = 0; i < gp.node_size(); ++i) {
    names.add(gp.node(i).name());
    for (const auto& o : gp.node(i).output()) {
      producer[o] = i;
      names.add(o);
    }
  }
  auto float_matrix = [&](const std::string& name) -> const onnx::TensorProto* {
    auto it = init_index.find(name);
    if (it == init_index.end() || graph_inputs.count(name)) return nullptr;  // an input may override it
    return &gp.initializer(it->second);
  };

  // Match: MatMul(x, W) or MatMul(x, Transpose(E)) with W / E constant float 2-D.
  PackResult res;
  std::vector<Candidate> cands;
  std::set<std::string> excluded;
  std::vector<bool> pattern_used(opt.exclude.size(), false);
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& n = gp.node(i);
    if (n.op_type() != "MatMul" || !is_onnx_domain(n.domain()) || n.input_size() != 2) continue;
    ++res.matmuls;
    Candidate c;
    c.node = i;
    const std::string& b = n.input(1);
    const onnx::TensorProto* w = float_matrix(b);
    if (w) {
      c.src = b;
    } else if (auto p = producer.find(b); p != producer.end()) {
      const onnx::NodeProto& t = gp.node(p->second);
      const onnx::AttributeProto* perm = find_attr(t, "perm");
      const bool swap = !perm || (perm->ints_size() == 2 && perm->ints(0) == 1 && perm->ints(1) == 0);
      if (t.op_type() == "Transpose" && is_onnx_domain(t.domain()) && t.input_size() == 1 && swap &&
          (w = float_matrix(t.input(0)))) {
        c.src = t.input(0);
        c.transposed = true;
        c.transpose_node = p->second;
      }
    }
    if (!w) {
      ++res.not_packed["weight_not_constant"];
      continue;
    }
    if (w->data_type() != onnx::TensorProto::FLOAT) {
      ++res.not_packed[fmt::format("weight_dtype_{}", dtype_name(static_cast<DType>(w->data_type())))];
      continue;
    }
    if (w->dims_size() != 2 || w->dims(0) == 0 || w->dims(1) == 0) {
      ++res.not_packed["weight_shape"];
      continue;
    }
    bool skip = false;
    for (size_t p = 0; p < opt.exclude.size(); ++p)
      for (const std::string* name : std::initializer_list<const std::string*>{&n.name(), &b, &c.src})
        if (pack_name_matches(opt.exclude[p], *name)) skip = pattern_used[p] = true;
    if (skip) {
      excluded.insert(c.src);
      ++res.not_packed["excluded"];
      continue;
    }
    cands.push_back(c);
  }
  for (size_t p = 0; p < opt.exclude.size(); ++p)
    if (!pattern_used[p])
      fail("{}: --exclude '{}' matches no MatMul weight (initializer, value or MatMul node name)", in, opt.exclude[p]);
  res.excluded.assign(excluded.begin(), excluded.end());

  // Quantize each distinct weight once.
  std::vector<Packed> packed;
  std::map<std::pair<std::string, bool>, size_t> packed_of;
  for (const Candidate& c : cands)
    if (packed_of.emplace(std::make_pair(c.src, c.transposed), packed.size()).second) {
      Packed p;
      p.src = c.src;
      p.transposed = c.transposed;
      packed.push_back(std::move(p));
    }
  PackProgress prog;
  prog.weights_total = packed.size();
  for (const Packed& p : packed) prog.bytes_total += g.value(g.find_value(p.src)).constant->bytes();
  if (opt.progress) opt.progress(prog);
  for (Packed& p : packed) {
    const Tensor& t = *g.value(g.find_value(p.src)).constant;
    Q4Source s;
    s.data = t.data<float>();
    s.transposed = p.transposed;
    s.k = static_cast<size_t>(p.transposed ? t.dim(1) : t.dim(0));
    s.n = static_cast<size_t>(p.transposed ? t.dim(0) : t.dim(1));
    const std::string what = fmt::format("{}: initializer '{}'{}", in, p.src, p.transposed ? " (transposed)" : "");
    prog.current = &p.src;
    p.q = quantize_q4(s, qo, what.c_str(), opt.pool);
    const std::string base = p.src + (p.transposed ? "_T" : "") + "_q4";
    p.codes_name = names.fresh(base);
    p.scale_name = names.fresh(base + "_scale");
    if (!qo.is_signed) p.zero_name = names.fresh(base + "_zero_point");
    res.float_bytes += t.bytes();
    res.packed_bytes += p.q.codes.size() + p.q.scales.size() * (qo.float16_scales ? 2 : 4) + p.q.zero_points.size();
    res.sum_sq_error += p.q.sum_sq_error;
    res.sum_sq += p.q.sum_sq;
    res.max_abs_error = std::max(res.max_abs_error, p.q.max_abs_error);
    ++prog.weights_done;
    prog.bytes_done += t.bytes();
    if (opt.progress) opt.progress(prog);
  }
  res.packed_weights = static_cast<int64_t>(packed.size());
  res.packed_matmuls = static_cast<int64_t>(cands.size());

  // Rewrite the nodes: DequantizeLinear (and Cast for float16 scales) just
  // before each MatMul, which keeps the order topological.
  std::map<int, const Candidate*> cand_at;
  std::map<int, int> transpose_readers;  // Transpose node -> rewritten MatMuls reading it
  for (const Candidate& c : cands) {
    cand_at[c.node] = &c;
    if (c.transposed) ++transpose_readers[c.transpose_node];
  }
  std::map<std::string, int> readers;  // value -> node inputs + graph outputs reading it
  for (const auto& n : gp.node())
    for (const auto& i : n.input()) ++readers[i];
  for (const auto& o : graph_outputs) ++readers[o];
  std::set<int> dead_transposes;
  for (const auto& [t, count] : transpose_readers)
    if (readers[gp.node(t).output(0)] == count) dead_transposes.insert(t);

  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < gp.node_size(); ++i) {
    if (dead_transposes.count(i)) continue;
    auto it = cand_at.find(i);
    if (it == cand_at.end()) {
      nodes.Add()->Swap(gp.mutable_node(i));
      continue;
    }
    onnx::NodeProto& mm = *gp.mutable_node(i);
    const Packed& p = packed[packed_of.at({it->second->src, it->second->transposed})];
    const std::string stem = mm.name().empty() ? fmt::format("MatMul_{}", i) : mm.name();
    onnx::NodeProto* dq = nodes.Add();
    dq->set_name(names.fresh(stem + "/DequantizeLinear"));
    dq->set_op_type("DequantizeLinear");
    dq->add_input(p.codes_name);
    dq->add_input(p.scale_name);
    if (!p.zero_name.empty()) dq->add_input(p.zero_name);
    std::string w = names.fresh(p.codes_name + "_dq");
    dq->add_output(w);
    auto* axis = dq->add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(qo.block_size ? 0 : 1);
    if (qo.block_size) {
      auto* bs = dq->add_attribute();
      bs->set_name("block_size");
      bs->set_type(onnx::AttributeProto::INT);
      bs->set_i(static_cast<int64_t>(qo.block_size));
    }
    if (qo.float16_scales) {
      onnx::NodeProto* cast = nodes.Add();
      cast->set_name(names.fresh(stem + "/Cast"));
      cast->set_op_type("Cast");
      cast->add_input(w);
      w = names.fresh(p.codes_name + "_dq_float");
      cast->add_output(w);
      auto* to = cast->add_attribute();
      to->set_name("to");
      to->set_type(onnx::AttributeProto::INT);
      to->set_i(onnx::TensorProto::FLOAT);
    }
    mm.set_input(1, w);
    nodes.Add()->Swap(&mm);
  }
  std::set<std::string> dead_values;
  for (int t : dead_transposes) dead_values.insert(gp.node(t).output(0));
  gp.mutable_node()->Swap(&nodes);
  if (!dead_values.empty()) {
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
    for (auto& vi : *gp.mutable_value_info())
      if (!dead_values.count(vi.name())) kept.Add()->Swap(&vi);
    gp.mutable_value_info()->Swap(&kept);
  }

  // Initializers: a packed source nothing reads any more gives its place to
  // its packed tensors; one still read (an embedding table) keeps it and
  // they follow it.
  readers.clear();
  for (const auto& n : gp.node())
    for (const auto& i : n.input()) ++readers[i];
  for (const auto& o : graph_outputs) ++readers[o];
  std::map<std::string, std::vector<const Packed*>> packed_from;
  for (const Packed& p : packed) packed_from[p.src].push_back(&p);
  // Numbered through DType: the system's onnx.proto may predate INT4 / UINT4.
  const int32_t code_type = static_cast<int32_t>(qo.is_signed ? DType::I4 : DType::U4);
  std::vector<OutTensor> tensors;
  bool source_external = false;
  for (int i = 0; i < gp.initializer_size(); ++i) {
    onnx::TensorProto& tp = *gp.mutable_initializer(i);
    const bool external = tp.data_location() == onnx::TensorProto::EXTERNAL;
    source_external |= external;
    auto from = packed_from.find(tp.name());
    if (from == packed_from.end() || readers[tp.name()] > 0) {
      OutTensor ot;
      if (external || (static_cast<size_t>(i) < refs.size() && refs[static_cast<size_t>(i)].present)) {
        const Tensor& t = *g.value(g.find_value(tp.name())).constant;
        ot.data = t.raw();
        ot.bytes = t.bytes();
        tp.clear_raw_data();
        tp.clear_external_data();
        tp.clear_data_location();
      } else {
        ot.verbatim = true;
      }
      ot.proto.Swap(&tp);
      tensors.push_back(std::move(ot));
    }
    if (from == packed_from.end()) continue;
    for (const Packed* p : from->second) {
      const Q4Quantized& q = p->q;
      const std::vector<int64_t> sdims = qo.block_size ? std::vector<int64_t>{int64_t(q.rows), int64_t(q.n)}
                                                       : std::vector<int64_t>{int64_t(q.n)};
      OutTensor codes, scale;
      set_tensor_header(codes.proto, p->codes_name, code_type, {int64_t(q.k), int64_t(q.n)});
      codes.data = q.codes.data();
      codes.bytes = q.codes.size();
      set_tensor_header(scale.proto, p->scale_name, qo.float16_scales ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT,
                        sdims);
      scale.data = qo.float16_scales ? static_cast<const void*>(q.scales_f16.data()) : q.scales.data();
      scale.bytes = q.scales.size() * (qo.float16_scales ? 2 : 4);
      tensors.push_back(std::move(codes));
      tensors.push_back(std::move(scale));
      if (!p->zero_name.empty()) {
        OutTensor zp;
        set_tensor_header(zp.proto, p->zero_name, code_type, sdims);
        zp.data = q.zero_points.data();
        zp.bytes = q.zero_points.size();
        tensors.push_back(std::move(zp));
      }
    }
  }

  if (!cands.empty()) {
    res.opset_raised = raise_opset(*model, in);
    if (model->ir_version() < kPackIrVersion) model->set_ir_version(kPackIrVersion);
    onnx::StringStringEntryProto* meta = nullptr;
    for (auto& kv : *model->mutable_metadata_props())
      if (kv.key() == "onebit.pack") meta = &kv;
    if (!meta) meta = model->add_metadata_props();
    meta->set_key("onebit.pack");
    meta->set_value(fmt::format("q4nx {} {} scales {}{}{}", qo.is_signed ? "int4" : "uint4",
                                qo.block_size ? fmt::format("block {}", qo.block_size) : "per-channel",
                                qo.float16_scales ? "float16" : "float32", qo.clip_search ? " clip-search" : "",
                                res.excluded.empty() ? "" : fmt::format(" excluded {}", res.excluded.size())));
  }

  // Where the bytes go.
  uint64_t total = 0;
  for (const OutTensor& t : tensors) total += t.bytes;
  res.external = opt.external == PackOptions::External::kAlways ||
                 (opt.external == PackOptions::External::kAuto && (source_external || total > kInlineLimit));
  if (!res.external && total > kInlineLimit)
    fail("{}: {:.2f} GB of tensors cannot be embedded (protobuf's limit is 2 GiB); use external data", out, total / 1e9);
  const fs::path out_path(out);
  const std::string data_name = out_path.filename().string() + ".data";
  res.external_path = (out_path.parent_path() / data_name).string();
  if (res.external) {
    for (const auto& tp : model->graph().initializer())
      for (const auto& kv : tp.external_data())
        if (kv.key() == "location" && fs::exists(fs::path(in).parent_path() / kv.value()) &&
            fs::exists(res.external_path) &&
            fs::equivalent(fs::path(in).parent_path() / kv.value(), res.external_path))
          fail("{}: the output's external data would overwrite the input's ('{}')", out, res.external_path);
  }
  // Both files only appear whole (base/atomic_file.h): the data first, then
  // the graph that points into it.
  std::unique_ptr<AtomicFile> data_file;
  if (res.external) data_file = std::make_unique<AtomicFile>(res.external_path);
  std::ofstream dummy;
  std::ofstream& data = data_file ? data_file->out() : dummy;
  uint64_t offset = 0;
  gp.clear_initializer();
  static const char zeros[kAlign] = {};
  for (OutTensor& t : tensors) {
    onnx::TensorProto* tp = gp.add_initializer();
    tp->Swap(&t.proto);
    if (t.verbatim) continue;
    if (!res.external || t.bytes < kExternalMinBytes) {
      tp->set_raw_data(t.bytes ? std::string(static_cast<const char*>(t.data), t.bytes) : std::string());
      continue;
    }
    if (t.bytes > kAlignAbove && offset % kAlign) {
      const uint64_t pad = kAlign - offset % kAlign;
      data.write(zeros, static_cast<std::streamsize>(pad));
      offset += pad;
    }
    data.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
    tp->set_data_location(onnx::TensorProto::EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
      auto* e = tp->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", data_name);
    kv("offset", std::to_string(offset));
    kv("length", std::to_string(t.bytes));
    offset += t.bytes;
  }
  AtomicFile graph_file(out);
  if (!model->SerializeToOstream(&graph_file.out())) fail("{}: serializing the model failed", out);
  if (data_file) data_file->commit();
  graph_file.commit();
  return res;
}

}  // namespace onebit
