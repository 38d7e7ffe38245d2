#include "npu/design.h"

#include <simdjson.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace onebit::npu {

namespace {

namespace fs = std::filesystem;

int64_t parse_dim(std::string_view s, const std::string& where, const char* what) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v <= 0 || v > (int64_t{1} << 20))
    fail("{}: {} is '{}', expected a positive integer up to 2^20", where, what, s);
  return v;
}

void check(const Design& d) {
  // The exact int32 accumulator of an int8 product holds K·128·128 < 2^31.
  if (d.k > 131071) fail("{}: k = {} is too deep for an exact int32 accumulator (at most 131071)", d.source, d.k);
}

}  // namespace

std::string Design::key() const { return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n); }

std::vector<Design> read_manifest(const std::string& path) {
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text)) fail("{}: cannot read the NPU design manifest", path);
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(text).get(root)) fail("{}: not valid JSON", path);
  simdjson::dom::array list;
  if (root["designs"].get_array().get(list))
    fail("{}: expected {{\"designs\": [{{\"m\": 16, \"k\": 1024, \"n\": 2048, ...}}]}}", path);
  const fs::path base = fs::path(path).parent_path();
  std::vector<Design> out;
  size_t index = 0;
  for (simdjson::dom::element e : list) {
    Design d;
    d.source = fmt::format("{}: design {}", path, index++);
    simdjson::dom::object obj;
    if (e.get_object().get(obj)) fail("{} is not an object", d.source);
    for (auto field : obj) {
      // Named, not a structured binding: the lambdas below capture them.
      const std::string_view key = field.key;
      const simdjson::dom::element value = field.value;
      auto dim = [&](const char* what) {
        int64_t v = 0;
        if (value.get_int64().get(v) || v <= 0 || v > (int64_t{1} << 20))
          fail("{}: '{}' must be a positive integer up to 2^20", d.source, what);
        return v;
      };
      auto str = [&](const char* what) {
        std::string_view s;
        if (value.get_string().get(s)) fail("{}: '{}' must be a string", d.source, what);
        return std::string(s);
      };
      auto file = [&](const char* what) {
        const std::string s = str(what);
        if (s.empty()) fail("{}: '{}' is empty", d.source, what);
        return fs::path(s).is_absolute() ? s : (base / s).string();
      };
      if (key == "m") d.m = dim("m");
      else if (key == "k") d.k = dim("k");
      else if (key == "n") d.n = dim("n");
      else if (key == "xclbin") d.xclbin = file("xclbin");
      else if (key == "insts") d.insts = file("insts");
      else if (key == "kernel") d.kernel = str("kernel");
      else if (key == "b_layout") {
        const std::string s = str("b_layout");
        if (s == "kn") d.b_layout = BLayout::kKN;
        else if (s == "nk") d.b_layout = BLayout::kNK;
        else fail("{}: b_layout is '{}', expected kn or nk", d.source, s);
      } else {
        fail("{}: unknown key '{}' (keys: m, k, n, xclbin, insts, kernel, b_layout)", d.source, std::string(key));
      }
    }
    if (d.m == 0 || d.k == 0 || d.n == 0) fail("{}: needs m, k and n", d.source);
    if (d.kernel.empty()) fail("{}: kernel is empty", d.source);
    d.source += " (" + d.key() + ")";
    check(d);
    for (const Design& o : out)
      if (o.k == d.k && o.n == d.n) fail("{}: a second design for k={} n={} (first: {})", d.source, d.k, d.n, o.source);
    out.push_back(std::move(d));
  }
  if (out.empty()) fail("{}: the manifest lists no designs", path);
  return out;
}

std::vector<Design> parse_short_form(const std::string& text) {
  std::vector<Design> out;
  size_t start = 0, index = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string entry = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    Design d;
    d.source = fmt::format("ONEBIT_NPU_DESIGNS entry {} '{}'", index++, entry);
    if (entry.empty()) fail("{}: empty entry", d.source);
    const size_t eq = entry.find('=');
    const std::string shape = entry.substr(0, eq);
    const size_t x1 = shape.find('x'), x2 = x1 == std::string::npos ? x1 : shape.find('x', x1 + 1);
    if (x1 == std::string::npos || x2 == std::string::npos || shape.find('x', x2 + 1) != std::string::npos)
      fail("{}: expected MxKxN[=XCLBIN:INSTS]", d.source);
    d.m = parse_dim(std::string_view(shape).substr(0, x1), d.source, "M");
    d.k = parse_dim(std::string_view(shape).substr(x1 + 1, x2 - x1 - 1), d.source, "K");
    d.n = parse_dim(std::string_view(shape).substr(x2 + 1), d.source, "N");
    if (eq != std::string::npos) {
      const std::string files = entry.substr(eq + 1);
      const size_t colon = files.find(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == files.size())
        fail("{}: expected XCLBIN:INSTS after '='", d.source);
      d.xclbin = files.substr(0, colon);
      d.insts = files.substr(colon + 1);
    }
    check(d);
    for (const Design& o : out)
      if (o.k == d.k && o.n == d.n) fail("{}: a second design for k={} n={}", d.source, d.k, d.n);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<uint32_t> read_instructions(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the instruction stream", path);
  std::vector<uint32_t> words;
  if (fs::path(path).extension() == ".txt") {
    std::string line;
    size_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      const size_t b = line.find_first_not_of(" \t\r");
      if (b == std::string::npos) continue;
      const size_t e = line.find_last_not_of(" \t\r");
      std::string_view w(line.data() + b, e - b + 1);
      if (w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) w.remove_prefix(2);
      uint32_t v = 0;
      const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v, 16);
      if (ec != std::errc() || end != w.data() + w.size())
        fail("{}:{}: '{}' is not a hex word", path, lineno, std::string(line));
      words.push_back(v);
    }
    return words;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() % 4 != 0) fail("{}: {} bytes is not a whole number of 32-bit words", path, bytes.size());
  words.resize(bytes.size() / 4);
  for (size_t i = 0; i < words.size(); ++i)
    words[i] = uint32_t(uint8_t(bytes[4 * i])) | uint32_t(uint8_t(bytes[4 * i + 1])) << 8 |
               uint32_t(uint8_t(bytes[4 * i + 2])) << 16 | uint32_t(uint8_t(bytes[4 * i + 3])) << 24;
  return words;
}

const char* target_name(Target t) { return t == Target::kNpu ? "npu" : "npu2"; }

std::optional<Target> parse_target(const std::string& name) {
  if (name == "npu") return Target::kNpu;
  if (name == "npu2") return Target::kNpu2;
  return std::nullopt;
}

// The rules (mlir-aie programming_examples/basic/matrix_multiplication):
//   per-core tile m×k×n: m % r == 0, k % s == 0, n % t == 0 with the int8
//   MAC shape r×s×t = 4×8×8 (npu) or 8×8×8 (npu2); A, B double-buffered and
//   C (int32) fit the core's 64 KiB;
//   whole_array: M % (4·m) == 0 (four core rows), K % k == 0,
//   N % (n·cols) == 0, cols ∈ {1, 2, 4} (npu) or {1, 2, 4, 8} (npu2);
//   single_core: M % m, K % k, N % n;
//   DMA descriptors: B is streamed in at most 64 column blocks per core
//   (N / (n·cols) ≤ 64).
std::optional<std::string> mlir_aie_command(int64_t m, int64_t k, int64_t n, Target target, std::string& why) {
  const int64_t r = target == Target::kNpu ? 4 : 8, s = 8, t = 8;
  const int64_t max_cols = target == Target::kNpu ? 4 : 8;
  auto fits = [](int64_t tm, int64_t tk, int64_t tn) { return 2 * (tm * tk + tk * tn) + 4 * tm * tn <= 64 * 1024; };
  auto pick = [](int64_t whole, int64_t unit, int64_t limit) -> int64_t {
    for (int64_t v = limit; v >= unit; v /= 2)
      if (v % unit == 0 && whole % v == 0) return v;
    return 0;
  };
  const int64_t tk = pick(k, s, 64);
  if (!tk) {
    why = fmt::format("K = {} is not a multiple of {}", k, s);
    return std::nullopt;
  }
  const std::string dir = "mlir-aie/programming_examples/basic/matrix_multiplication/";
  const std::string dev = target == Target::kNpu2 ? " devicename=npu2" : "";
  // whole_array first: every core of the array on one GEMM.
  for (int64_t cols = max_cols; cols >= 1; cols /= 2) {
    if (m % (4 * r) != 0) break;
    const int64_t tm = pick(m / 4, r, 64);
    if (!tm || (m / 4) % tm != 0) break;
    for (int64_t tn = 64; tn >= t; tn /= 2) {
      if (n % (tn * cols) != 0 || n / (tn * cols) > 64 || !fits(tm, tk, tn)) continue;
      return fmt::format("make -C {}whole_array M={} K={} N={} m={} k={} n={} n_aie_cols={} dtype_in=i8 "
                         "dtype_out=i32{}",
                         dir, m, k, n, tm, tk, tn, cols, dev);
    }
  }
  // single_core: one core, any M that its row tile divides.
  const int64_t tm = pick(m, r, 64);
  if (tm)
    for (int64_t tn = 64; tn >= t; tn /= 2) {
      if (n % tn != 0 || n / tn > 64 || !fits(tm, tk, tn)) continue;
      return fmt::format("make -C {}single_core M={} K={} N={} m={} k={} n={} dtype_in=i8 dtype_out=i32{}", dir, m,
                         k, n, tm, tk, tn, dev);
    }
  if (!tm) why = fmt::format("M = {} is not a multiple of the {} MAC's {} rows", m, target_name(target), r);
  else if (n % t != 0) why = fmt::format("N = {} is not a multiple of {}", n, t);
  else
    why = fmt::format("N = {} needs more than 64 column blocks of at most 64 (the DMA descriptor limit); split N on "
                      "the host",
                      n);
  return std::nullopt;
}

}  // namespace onebit::npu
