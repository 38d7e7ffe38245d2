#include "graph/census.h"

#include "base/json.h"

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <set>

namespace onebit {

namespace {

std::string dims_str(const Value& v) {
  if (!v.has_shape) return "?";
  std::string s = "[";
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (i) s += ",";
    s += v.dims[i].value >= 0 ? std::to_string(v.dims[i].value) : (v.dims[i].param.empty() ? "?" : v.dims[i].param);
  }
  return s + "]";
}

// Shape of a value computed from initializers alone through the ops that
// carry a weight to its MatMul (DequantizeLinear, Cast, Identity, Transpose),
// or nothing if it is not such a constant.
std::optional<Shape> constant_shape(const Graph& g, int v, int depth = 0) {
  if (v < 0 || depth > 8) return std::nullopt;
  const Value& val = g.value(v);
  if (val.constant) return val.constant->shape();
  if (val.producer < 0) return std::nullopt;
  const Node& n = g.node(val.producer);
  if (n.op_type == "DequantizeLinear" || n.op_type == "Cast" || n.op_type == "Identity")
    return constant_shape(g, n.inputs.empty() ? -1 : n.inputs[0], depth + 1);
  if (n.op_type == "Transpose") {
    auto s = constant_shape(g, n.inputs.empty() ? -1 : n.inputs[0], depth + 1);
    if (!s) return std::nullopt;
    std::vector<int64_t> perm = n.attrs.has("perm") ? n.attrs.find("perm")->ints : std::vector<int64_t>{};
    Shape out(s->size());
    for (size_t i = 0; i < s->size(); ++i) {
      const size_t from = perm.empty() ? s->size() - 1 - i : static_cast<size_t>(perm[i]);
      if (from >= s->size()) return std::nullopt;
      out[i] = (*s)[from];
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace

Census take_census(const Graph& g) {
  Census c;
  c.ir_version = g.ir_version;
  c.producer = g.producer_name + (g.producer_version.empty() ? "" : " " + g.producer_version);
  for (const auto& [d, v] : g.opsets) c.opsets[domain_name(d)] = v;
  std::set<std::string> custom;
  for (const Node& n : g.nodes) {
    ++c.nodes;
    ++c.op_counts[n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type];
    if (!n.domain.empty() && n.domain != "com.microsoft") custom.insert(n.domain);
    if (n.domain == "com.microsoft" && (n.op_type == "MatMulNBits" || n.op_type == "MatMulBnb4")) {
      const int64_t block = n.attrs.get_int("block_size", 0);
      const std::string format =
          n.op_type == "MatMulNBits"
              ? fmt::format("{}-bit block {}", n.attrs.get_int("bits", 4), block)
              : fmt::format("{} block {}", n.attrs.get_int("quant_type", -1) == 0 ? "fp4" : "nf4", block);
      ++c.quantized_matmuls[{n.op_type, format, n.attrs.get_int("K", 0), n.attrs.get_int("N", 0)}];
    }
    if (n.op_type != "MatMul" || !n.domain.empty()) continue;
    ++c.matmuls;
    auto s = constant_shape(g, n.inputs.size() > 1 ? n.inputs[1] : -1);
    if (s && s->size() == 2) {
      ++c.constant_weight_matmuls;
      ++c.weight_shapes[{(*s)[0], (*s)[1]}];
    }
  }
  c.custom_domains.assign(custom.begin(), custom.end());
  for (const Value& v : g.values)
    if (v.constant && v.producer < 0) {
      ++c.initializers;
      c.initializer_bytes += static_cast<int64_t>(v.constant->bytes());
    }
  for (int v : g.inputs) {
    const Value& val = g.value(v);
    c.inputs.push_back({val.name, std::string(dtype_name(val.dtype)), dims_str(val)});
  }
  for (int v : g.outputs) {
    const Value& val = g.value(v);
    c.outputs.push_back({val.name, std::string(dtype_name(val.dtype)), dims_str(val)});
  }
  return c;
}

std::string census_text(const Census& c) {
  std::string s;
  s += fmt::format("ir_version      {}\n", c.ir_version);
  s += fmt::format("producer        {}\n", c.producer.empty() ? "-" : c.producer);
  s += "opsets          ";
  for (const auto& [d, v] : c.opsets) s += fmt::format("{} {}  ", d, v);
  s += fmt::format("\nnodes           {}\n", c.nodes);
  s += fmt::format("MatMul          {} ({} with a constant weight)\n", c.matmuls, c.constant_weight_matmuls);
  s += fmt::format("weight shapes   {} distinct (K x N: count)\n", c.weight_shapes.size());
  for (const auto& [kn, n] : c.weight_shapes) s += fmt::format("  {:>6} x {:<7} {}\n", kn.first, kn.second, n);
  int64_t quantized = 0;
  for (const auto& [key, n] : c.quantized_matmuls) quantized += n;
  s += fmt::format("quantized MatMul {} ({} distinct: op format K x N: count)\n", quantized, c.quantized_matmuls.size());
  for (const auto& [key, n] : c.quantized_matmuls)
    s += fmt::format("  {} {} {:>6} x {:<7} {}\n", std::get<0>(key), std::get<1>(key), std::get<2>(key),
                     std::get<3>(key), n);
  s += fmt::format("custom domains  {}", c.custom_domains.size());
  for (const auto& d : c.custom_domains) s += " " + d;
  s += fmt::format("\ninitializers    {} ({:.1f} MiB)\n", c.initializers, c.initializer_bytes / 1048576.0);
  s += "inputs\n";
  for (const auto& io : c.inputs) s += fmt::format("  {:<28} {:<8} {}\n", io.name, io.dtype, io.dims);
  s += "outputs\n";
  for (const auto& io : c.outputs) s += fmt::format("  {:<28} {:<8} {}\n", io.name, io.dtype, io.dims);
  s += "ops\n";
  for (const auto& [op, n] : c.op_counts) s += fmt::format("  {:<28} {}\n", op, n);
  return s;
}

std::string census_json(const Census& c) {
  Json j;
  j["ir_version"] = c.ir_version;
  j["nodes"] = c.nodes;
  j["matmuls"] = c.matmuls;
  j["constant_weight_matmuls"] = c.constant_weight_matmuls;
  j["opsets"] = Json::object();
  for (const auto& [d, v] : c.opsets) j["opsets"][d] = v;
  j["op_counts"] = Json::object();
  for (const auto& [op, n] : c.op_counts) j["op_counts"][op] = n;
  j["weight_shapes"] = Json::array();
  for (const auto& [kn, n] : c.weight_shapes) j["weight_shapes"].push_back({kn.first, kn.second, n});
  j["quantized_matmuls"] = Json::array();
  for (const auto& [key, n] : c.quantized_matmuls)
    j["quantized_matmuls"].push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), n});
  j["custom_domains"] = c.custom_domains;
  j["initializers"] = c.initializers;
  j["initializer_bytes"] = c.initializer_bytes;
  auto ios = [](const std::vector<Census::Io>& v) {
    Json a = Json::array();
    for (const Census::Io& io : v) a.push_back({{"name", io.name}, {"dtype", io.dtype}, {"dims", io.dims}});
    return a;
  };
  j["inputs"] = ios(c.inputs);
  j["outputs"] = ios(c.outputs);
  return json_text(j) + "\n";
}

}  // namespace onebit
