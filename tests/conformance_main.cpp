// ONNX backend node tests, run from the index scripts/conformance_prepare.py
// writes. Each runnable test is loaded with 1bit's loader, run twice — with
// every graph pass and with none (so a rewrite cannot hide a kernel bug, nor a
// kernel a rewrite bug) — and its outputs compared with the expected .pb
// files: floats with the backend runner's default tolerance (rtol 1e-3,
// atol 1e-7; NaN equals NaN), everything else exactly.
//
//   conformance INDEX_DIR [--filter SUBSTRING] [--verbose]
//
// Prints one line per failure and a summary; exits non-zero on any failure.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "ops/register_ops.h"

namespace fs = std::filesystem;
using namespace onebit;

namespace {

struct Row {
  std::string name, status, opset, reason;
};

std::vector<Row> read_index(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "index.tsv");
  if (!in) throw Error(fmt::format("{}/index.tsv: missing; run scripts/conformance_prepare.py", dir));
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    Row r;
    std::getline(ss, r.name, '\t');
    std::getline(ss, r.status, '\t');
    std::getline(ss, r.opset, '\t');
    std::getline(ss, r.reason, '\t');
    rows.push_back(r);
  }
  return rows;
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (int i = 0;; ++i) {
    fs::path p = dir / fmt::format("{}_{}.pb", prefix, i);
    if (!fs::exists(p)) break;
    files.push_back(p);
  }
  return files;
}

// Empty string when equal, else what differs.
std::string compare(const Tensor& want, const Tensor& got) {
  if (want.dtype() != got.dtype())
    return fmt::format("dtype {} expected {}", dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (want.shape() != got.shape())
    return fmt::format("shape {} expected {}", shape_str(got.shape()), shape_str(want.shape()));
  const int64_t n = want.size();
  if (dtype_is_float(want.dtype())) {
    for (int64_t i = 0; i < n; ++i) {
      const double w = tensor_double_at(want, i), g = tensor_double_at(got, i);
      if (std::isnan(w) && std::isnan(g)) continue;
      if (std::isinf(w) && w == g) continue;
      if (!(std::fabs(w - g) <= 1e-7 + 1e-3 * std::fabs(w)))
        return fmt::format("element {} is {}, expected {}", i, g, w);
    }
    return {};
  }
  if (std::memcmp(want.raw(), got.raw(), want.bytes()) != 0) {
    if (dtype_bits(want.dtype()) >= 8)
      for (int64_t i = 0; i < n; ++i)
        if (tensor_int_at(want, i) != tensor_int_at(got, i))
          return fmt::format("element {} is {}, expected {}", i, tensor_int_at(got, i), tensor_int_at(want, i));
    return "bytes differ";
  }
  return {};
}

// Runs one test directory; empty string on success.
std::string run_test(const fs::path& dir, bool optimized) {
  try {
    SessionOptions opts;
    opts.threads = 2;
    if (!optimized) opts.stop_after_pass = 0;
    Session session(load_onnx((dir / "model.onnx").string()), default_op_registry(), opts);
    for (const auto& set : fs::directory_iterator(dir)) {
      if (!set.is_directory() || set.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
      std::vector<NamedTensor> inputs;
      const auto in_names = session.input_names();
      const auto in_files = numbered(set.path(), "input");
      if (in_files.size() != in_names.size())
        return fmt::format("{} input files for {} graph inputs", in_files.size(), in_names.size());
      for (size_t i = 0; i < in_files.size(); ++i) {
        std::string name;
        Tensor t = load_tensor_file(in_files[i].string(), &name);
        inputs.push_back({in_names[i], std::move(t)});
      }
      const std::vector<Tensor> outputs = session.run(inputs);
      const auto out_files = numbered(set.path(), "output");
      if (out_files.size() != outputs.size())
        return fmt::format("{} outputs, {} expected", outputs.size(), out_files.size());
      for (size_t i = 0; i < outputs.size(); ++i) {
        const std::string diff = compare(load_tensor_file(out_files[i].string()), outputs[i]);
        if (!diff.empty()) return fmt::format("{}: output {}: {}", set.path().filename().string(), i, diff);
      }
    }
    return {};
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: conformance INDEX_DIR [--filter SUBSTRING] [--verbose]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::string filter;
  bool verbose = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
    else if (std::strcmp(argv[i], "--verbose") == 0) verbose = true;
  }
  std::vector<Row> rows;
  try {
    rows = read_index(dir);
  } catch (const Error& e) {
    fmt::print(stderr, "conformance: {}\n", e.what());
    return 2;
  }
  int ran = 0, passed = 0, excluded = 0, converted = 0;
  std::vector<std::string> failures;
  std::map<std::string, int> exclusion_reasons;
  for (const Row& r : rows) {
    if (!filter.empty() && r.name.find(filter) == std::string::npos) continue;
    if (r.status != "ready") {
      ++excluded;
      ++exclusion_reasons[r.reason];
      continue;
    }
    ++ran;
    if (!r.reason.empty()) ++converted;
    std::string err = run_test(fs::path(dir) / r.name, true);
    if (err.empty()) err = run_test(fs::path(dir) / r.name, false);
    if (err.empty()) {
      ++passed;
      if (verbose) fmt::print("pass {}\n", r.name);
    } else {
      failures.push_back(r.name);
      fmt::print("FAIL {}: {}\n", r.name, err);
    }
  }
  if (verbose)
    for (const auto& [reason, n] : exclusion_reasons) fmt::print("excluded x{}: {}\n", n, reason);
  fmt::print("conformance: {} ran, {} passed, {} failed ({} converted to opset 21); {} excluded by the manifest "
             "or the converter\n",
             ran, passed, ran - passed, converted, excluded);
  return ran > 0 && passed == ran ? 0 : 1;
}
