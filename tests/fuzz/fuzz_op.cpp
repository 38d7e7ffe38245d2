// One node of any registered op, with fuzzed inputs (dtype, shape, data;
// constants or graph inputs) and fuzzed attributes, built as a real ONNX
// model and run through the loader, folding and the session. The op table is
// the registry itself, so a new op is fuzzed without touching this file.
//
// Input: an op named in text, so that a kept input replays the same op
// however the registry grows — "QuantizeLinear\0", "com.onebit:Qd8MatMul\0"
// then one byte, the ai.onnx opset (clamped to the entry's versions) — or,
// for any other input, two bytes picking a registry entry and one picking
// an opset it covers. The rest: inputs (dtype, rank, dims, constant or
// graph input, data), outputs, attributes.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/op_registry.h"
#include "tests/fuzz/fuzz_graph.h"

namespace {

class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  int64_t small() { return static_cast<int8_t>(u8()) % 6; }  // -5..5
  int64_t wide() {
    switch (u8() % 8) {
      case 0: return INT64_MAX;
      case 1: return INT64_MIN;
      case 2: return INT32_MAX;
      case 3: return -1;
      default: return small();
    }
  }
  size_t left() const { return n_ - i_; }
  const uint8_t* take(size_t n) {
    const uint8_t* p = d_ + i_;
    i_ += std::min(n, left());
    return p;
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

const int32_t kTypes[] = {1, 7, 6, 2, 3, 10, 9, 11, 5, 16};  // f32 i64 i32 u8 i8 f16 bool f64 i16 bf16
const char* kAttrs[] = {"axis",     "axes",      "keepdims",   "perm",         "to",      "mode",
                        "k",        "largest",   "sorted",     "epsilon",      "alpha",   "beta",
                        "transA",   "transB",    "exclusive",  "reverse",      "upper",   "allowzero",
                        "num_outputs", "split",  "batch_dims", "reduction",    "equation", "start",
                        "end",      "fmod",      "noop_with_empty_axes", "select_last_index", "stash_type",
                        "block_size", "output_dtype", "saturate", "half", "transB",
                        "num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved", "scale", "softcap",
                        "local_window_size", "bits", "quantize_axis", "gather_axis", "interleaved",
                        "rotary_embedding_dim", "is_causal", "q_num_heads", "precision", "accuracy_level", "K", "N"};

constexpr int64_t kMinOpset = onebit::kOnnxOpsetMin, kMaxOpset = onebit::kOnnxOpsetMax;  // what the loader takes

// The ai.onnx opset a node of `e` is built at: `want` clamped to the
// versions `e` covers and the loader takes.
int64_t opset_for(const onebit::OpEntry& e, int64_t want) {
  if (!e.domain.empty()) return 21;
  const int64_t lo = std::max(e.since, kMinOpset), hi = std::max(lo, std::min(e.until, kMaxOpset));
  return std::clamp(want, lo, hi);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  if (size < 4) return 0;
  const auto& entries = default_op_registry().entries();
  const OpEntry* entry = nullptr;
  int64_t opset = 21;
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, std::min<size_t>(size, 64)));
  if (nul && ((data[0] >= 'A' && data[0] <= 'Z') || (data[0] >= 'a' && data[0] <= 'z'))) {
    const std::string name(reinterpret_cast<const char*>(data), static_cast<size_t>(nul - data));
    const size_t colon = name.find(':');
    const std::string domain = colon == std::string::npos ? "" : name.substr(0, colon);
    const std::string op = colon == std::string::npos ? name : name.substr(colon + 1);
    const size_t at = static_cast<size_t>(nul - data) + 1;
    const int64_t want = at < size ? data[at] : 21;
    for (const OpEntry& e : entries)
      if (e.op_type == op && e.domain == domain && (!entry || (e.since <= want && want <= e.until))) entry = &e;
    if (!entry) return 0;
    opset = opset_for(*entry, want);
    data += std::min(size, at + 1);
    size -= std::min(size, at + 1);
  }
  Bytes in(data, size);
  if (!entry) {
    const size_t pick = (static_cast<size_t>(in.u8()) << 8 | in.u8()) % entries.size();
    entry = &entries[pick];
    opset = opset_for(*entry, kMinOpset + in.u8() % (kMaxOpset - kMinOpset + 1));
  }
  const OpEntry& e = *entry;
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  if (!e.domain.empty()) {
    auto* d = m.add_opset_import();
    d->set_domain(e.domain);
    d->set_version(e.since);
  }
  auto* g = m.mutable_graph();
  g->set_name("fuzz");
  auto* node = g->add_node();
  node->set_op_type(e.op_type);
  node->set_domain(e.domain);
  node->set_name("n");
  const int inputs = 1 + in.u8() % 4, outputs = 1 + in.u8() % 3;
  for (int i = 0; i < inputs; ++i) {
    const std::string name = "x" + std::to_string(i);
    const uint8_t flags = in.u8();
    if (flags == 0xff) {
      node->add_input("");  // an omitted optional input
      continue;
    }
    node->add_input(name);
    const int32_t type = kTypes[flags % 10];
    const int rank = (flags >> 4) % 4;
    std::vector<int64_t> dims;
    int64_t count = 1;
    for (int r = 0; r < rank; ++r) {
      dims.push_back(in.u8() % 5);
      count *= dims.back();
    }
    if (flags & 8) {  // a constant (folding) or a graph input (run time)
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(type);
      for (int64_t d : dims) t->add_dims(d);
      const int bits = dtype_bits(static_cast<DType>(type));
      const size_t bytes = static_cast<size_t>(count) * static_cast<size_t>(bits / 8);
      const uint8_t* p = in.take(bytes);
      std::string raw(reinterpret_cast<const char*>(p), std::min(bytes, size - static_cast<size_t>(p - data)));
      raw.resize(bytes, 1);
      t->set_raw_data(raw);
    } else {
      auto* vi = g->add_input();
      vi->set_name(name);
      auto* tt = vi->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(type);
      for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }
  for (int o = 0; o < outputs; ++o) {
    const std::string name = "y" + std::to_string(o);
    node->add_output(name);
    g->add_output()->set_name(name);
  }
  const int attrs = in.u8() % 4;
  for (int a = 0; a < attrs; ++a) {
    auto* at = node->add_attribute();
    at->set_name(kAttrs[in.u8() % (sizeof kAttrs / sizeof *kAttrs)]);
    switch (in.u8() % 5) {
      case 0:
        at->set_type(onnx::AttributeProto::INT);
        at->set_i(in.wide());
        break;
      case 1:
        at->set_type(onnx::AttributeProto::INTS);
        for (int k = in.u8() % 5; k-- > 0;) at->add_ints(in.wide());
        break;
      case 2:
        at->set_type(onnx::AttributeProto::FLOAT);
        at->set_f(static_cast<float>(in.small()) / 4.0f);
        break;
      case 3:
        at->set_type(onnx::AttributeProto::STRING);
        at->set_s(std::string(reinterpret_cast<const char*>(in.take(4)), std::min<size_t>(4, in.left())));
        break;
      default:
        at->set_type(onnx::AttributeProto::FLOATS);
        for (int k = in.u8() % 4; k-- > 0;) at->add_floats(static_cast<float>(in.small()));
    }
  }
  const std::string bytes = m.SerializeAsString();
  fuzz::expect_clean(
      [&] { fuzz::run_graph(load_onnx_bytes(bytes.data(), bytes.size(), "fuzz-op.onnx", fuzz::scratch()), false); });
  return 0;
}
