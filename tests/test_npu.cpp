// The NPU dispatcher (npu/dispatcher.h) on the reference device — labelled
// everywhere as software, not an NPU — through the real kernels: every
// device result must be bit-identical to the host path, rows below
// kDeviceMinRows stay on the host, more rows than a design's M split into
// launches, and every fault ends in the host result with one line saying
// why. Also the design table and the mlir-aie build rules.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "graph/npy.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "npu/design.h"
#include "npu/dispatcher.h"
#include "npu/reference_device.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kUint8 = 2, kInt8 = 3, kInt4 = 22;

// A QDQ group with the quantization forms the fusion folds.
struct Qdq {
  int64_t k = 64, n = 32;
  int32_t x_type = kInt8;
  bool x_per_row = false, w_per_col = false, zero_points = false, with_q = true;
  int64_t rows = 16;  // x_per_row needs the row count in the scale
};

std::vector<float> scales(size_t count, int seed) {
  std::vector<float> s(count);
  for (size_t i = 0; i < count; ++i) s[i] = 0.01f + 0.003f * float((i * 7 + size_t(seed)) % 11);
  return s;
}

std::string save_qdq(const Qdq& c, const std::string& name) {
  ModelBuilder b;
  const int64_t m = c.x_per_row ? c.rows : -1;
  b.input("x_q", c.x_type, {m, c.k});
  b.output(c.with_q ? "y_q" : "y", c.with_q ? kInt8 : kFloat, {m, c.n});
  std::mt19937 rng(static_cast<unsigned>(c.k * 31 + c.n));
  std::vector<int8_t> w(static_cast<size_t>(c.k * c.n));
  for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  b.initializer<int8_t>("w_q", kInt8, {c.k, c.n}, w);
  const size_t xs = c.x_per_row ? size_t(c.rows) : 1, ws = c.w_per_col ? size_t(c.n) : 1;
  const std::vector<int64_t> xd = xs == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(xs)};
  const std::vector<int64_t> wd = ws == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(ws)};
  b.initializer<float>("x_scale", kFloat, xd, scales(xs, 0));
  b.initializer<float>("w_scale", kFloat, wd, scales(ws, 3));
  std::vector<std::string> dqx = {"x_q", "x_scale"}, dqw = {"w_q", "w_scale"};
  if (c.zero_points) {
    if (c.x_type == kInt8) {
      std::vector<int8_t> z(xs);
      for (size_t i = 0; i < xs; ++i) z[i] = static_cast<int8_t>(-30 + int(i) % 9);
      b.initializer<int8_t>("x_zp", kInt8, xd, z);
    } else {
      std::vector<uint8_t> z(xs);
      for (size_t i = 0; i < xs; ++i) z[i] = static_cast<uint8_t>(120 + i % 9);
      b.initializer<uint8_t>("x_zp", kUint8, xd, z);
    }
    std::vector<int8_t> zw(ws);
    for (size_t i = 0; i < ws; ++i) zw[i] = static_cast<int8_t>(-20 + int(i) % 7);
    b.initializer<int8_t>("w_zp", kInt8, wd, zw);
    dqx.push_back("x_zp");
    dqw.push_back("w_zp");
  }
  auto& nx = b.node("DequantizeLinear", dqx, {"x_dq"}, "dq_x");
  if (xs > 1) ModelBuilder::attr_int(nx, "axis", 0);
  auto& nw = b.node("DequantizeLinear", dqw, {"w_dq"}, "dq_w");
  if (ws > 1) ModelBuilder::attr_int(nw, "axis", 1);
  b.node("MatMul", {"x_dq", "w_dq"}, {"y"}, "proj");
  if (c.with_q) {
    b.initializer<float>("y_scale", kFloat, {}, {0.5f});
    b.initializer<int8_t>("y_zp", kInt8, {}, {-3});
    b.node("QuantizeLinear", {"y", "y_scale", "y_zp"}, {"y_q"}, "q_y");
  }
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  return path;
}

Tensor random_x(DType t, int64_t m, int64_t k, unsigned seed) {
  Tensor x = Tensor::allocate(t, {m, k});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < x.size(); ++i) static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(rng());
  return x;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

struct Lines {
  std::vector<std::string> all;
  size_t count(const std::string& part) const {
    size_t n = 0;
    for (const auto& l : all) n += l.find(part) != std::string::npos;
    return n;
  }
};

// A dispatcher on a reference device, its lines collected.
struct Rig {
  npu::ReferenceDevice* ref = nullptr;
  std::unique_ptr<npu::Dispatcher> dispatcher;
  Lines lines;
  Rig(std::vector<npu::Design> designs, npu::ReferenceFaults faults = {}, npu::DispatcherOptions o = {}) {
    auto dev = std::make_unique<npu::ReferenceDevice>(faults);
    ref = dev.get();
    o.trace = true;
    o.log = [this](const std::string& l) { lines.all.push_back(l); };
    dispatcher = std::make_unique<npu::Dispatcher>(std::move(dev), std::move(designs), o);
  }
};

std::vector<npu::Design> designs(std::initializer_list<std::array<int64_t, 3>> mkn) {
  std::vector<npu::Design> out;
  for (auto [m, k, n] : mkn) {
    npu::Design d;
    d.m = m;
    d.k = k;
    d.n = n;
    d.source = "test";
    out.push_back(d);
  }
  return out;
}

std::vector<Tensor> run(const std::string& path, const std::vector<NamedTensor>& in, npu::Dispatcher* npu,
                        SessionOptions o = {}) {
  o.threads = 2;
  o.kernel.npu = npu;
  Session s(load_onnx(path), default_op_registry(), o);
  return s.run(in);
}

}  // namespace

TEST_CASE("npu qdq: the Qwen3-0.6B projection shapes at 5, 16, 32 and 100 rows on M=16 and M=32 designs", "[npu]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1024, 2048}, {1024, 1024}, {2048, 1024}, {1024, 3072},
                                                           {3072, 1024}};
  int variant = 0;
  for (auto [k, n] : shapes)
    for (int64_t M : {16, 32})
      for (int64_t rows : {5, 16, 32, 100}) {
        // Cycle the quantization forms over the cases: per tensor with Q,
        // per axis without, asymmetric uint8 with Q, asymmetric int8 per row.
        Qdq c;
        c.k = k;
        c.n = n;
        c.rows = rows;
        switch (variant++ % 4) {
          case 0: break;
          case 1: c.w_per_col = true, c.with_q = false; break;
          case 2: c.x_type = kUint8, c.zero_points = true; break;
          case 3: c.x_per_row = true, c.w_per_col = true, c.zero_points = true; break;
        }
        INFO("K=" << k << " N=" << n << " M=" << M << " rows=" << rows << " variant " << (variant - 1) % 4);
        const std::string path = save_qdq(c, "npu_proj");
        const Tensor x = random_x(c.x_type == kInt8 ? DType::I8 : DType::U8, rows, k, unsigned(rows + k));
        const std::vector<Tensor> host = run(path, {{"x_q", x}}, nullptr);
        Rig rig(designs({{M, k, n}}));
        const std::vector<Tensor> dev = run(path, {{"x_q", x}}, rig.dispatcher.get());
        CHECK(same_bits(host[0], dev[0]));
        const npu::DispatchCounters& cnt = rig.dispatcher->counters();
        CHECK(cnt.gemms_routed == 1);
        if (rows < 16) {
          CHECK(cnt.launches == 0);
          CHECK(cnt.host_row_calls == 1);
          CHECK(rig.lines.count("npu_qdq_host_rows m=" + std::to_string(rows)) == 1);
        } else {
          const int64_t launches = (rows + M - 1) / M;
          CHECK(cnt.launches == launches);
          CHECK(cnt.device_calls == 1);
          CHECK(cnt.padded_rows == launches * M - rows);
          CHECK(rig.lines.count(fmt::format("npu_qdq_device m={} k={} n={} design={}x{}x{} runs={}", rows, k, n, M, k,
                                            n, launches)) == 1);
        }
      }
}

TEST_CASE("npu qdq: per tensor, per axis, asymmetric, int8 and uint8, with and without Q", "[npu]") {
  for (int32_t xt : {kInt8, kUint8})
    for (bool per_row : {false, true})
      for (bool per_col : {false, true})
        for (bool zp : {false, true})
          for (bool q : {false, true}) {
            Qdq c;
            c.k = 96;
            c.n = 80;
            c.rows = 40;
            c.x_type = xt;
            c.x_per_row = per_row;
            c.w_per_col = per_col;
            c.zero_points = zp;
            c.with_q = q;
            INFO("x " << (xt == kInt8 ? "int8" : "uint8") << " per_row " << per_row << " per_col " << per_col << " zp "
                      << zp << " q " << q);
            const std::string path = save_qdq(c, "npu_forms");
            const Tensor x = random_x(xt == kInt8 ? DType::I8 : DType::U8, 40, 96, 5);
            for (npu::BLayout layout : {npu::BLayout::kKN, npu::BLayout::kNK}) {
              auto d = designs({{16, 96, 80}});
              d[0].b_layout = layout;
              Rig rig(d);
              CHECK(same_bits(run(path, {{"x_q", x}}, nullptr)[0], run(path, {{"x_q", x}}, rig.dispatcher.get())[0]));
              CHECK(rig.dispatcher->counters().device_calls == 1);
            }
          }
}

TEST_CASE("npu qdq: a shape with no design stays on the host and says so", "[npu]") {
  Qdq c;
  const std::string path = save_qdq(c, "npu_nodesign");
  const Tensor x = random_x(DType::I8, 20, 64, 9);
  Rig rig(designs({{16, 64, 48}}));
  CHECK(same_bits(run(path, {{"x_q", x}}, nullptr)[0], run(path, {{"x_q", x}}, rig.dispatcher.get())[0]));
  CHECK(rig.dispatcher->counters().gemms_routed == 0);
  CHECK(rig.dispatcher->counters().gemms_bound == 1);
  CHECK(rig.lines.count("npu_qdq_fallback node='proj/qdq' k=64 n=32 why=no-design") == 1);
  CHECK(rig.ref->counters().launches == 0);
}

TEST_CASE("npu qdq: every injected fault ends in the host result and one line saying why", "[npu]") {
  Qdq c;
  c.zero_points = true;
  const std::string path = save_qdq(c, "npu_faults");
  const Tensor x = random_x(DType::I8, 40, 64, 4);
  const Tensor host = run(path, {{"x_q", x}}, nullptr)[0];
  struct Fault {
    const char* name;
    npu::ReferenceFaults f;
    const char* line;  // the one notice (not a trace line) it must produce
  };
  std::vector<Fault> faults;
  {
    npu::ReferenceFaults f;
    f.open_fails = true;
    faults.push_back({"open fails", f, "does not open"});
  }
  {
    npu::ReferenceFaults f;
    f.context_limit = 0;
    faults.push_back({"context limit", f, "CREATE_HWCTX"});
  }
  for (npu::RunState st : {npu::RunState::kTimeout, npu::RunState::kAbort, npu::RunState::kError}) {
    npu::ReferenceFaults f;
    f.fail_launch = 1;  // the second launch of the first call
    f.fail_state = st;
    faults.push_back({npu::run_state_name(st), f, npu::run_state_name(st)});
  }
  {
    npu::ReferenceFaults f;
    f.fail_launch = 0;
    f.launch_throws = true;
    faults.push_back({"launch throws", f, "launch threw"});
  }
  {
    npu::ReferenceFaults f;
    f.throw_on_sync = 3;  // A at open, B at bind, A of launch 0, then C of launch 0
    faults.push_back({"sync throws", f, "sync 3"});
  }
  for (const Fault& fault : faults) {
    INFO(fault.name);
    Rig rig(designs({{16, 64, 32}}), fault.f);
    npu::Dispatcher* d = rig.dispatcher.get();
    SessionOptions o;
    o.threads = 2;
    o.kernel.npu = d;
    Session s(load_onnx(path), default_op_registry(), o);
    CHECK(same_bits(s.run({{"x_q", x}})[0], host));
    CHECK(same_bits(s.run({{"x_q", x}})[0], host));  // and every later call, on the host
    size_t notices = 0;
    for (const auto& l : rig.lines.all) notices += l.rfind("npu: ", 0) == 0;
    CHECK(notices == 1);
    CHECK(rig.lines.count(fault.line) == 1);
    CHECK(d->counters().device_calls == 0);
  }
}

TEST_CASE("npu: a skipped sync or an empty instruction stream gives wrong output, and it shows", "[npu]") {
  Qdq c;
  c.with_q = false;
  const std::string path = save_qdq(c, "npu_sync");
  const Tensor x = random_x(DType::I8, 32, 64, 6);
  const Tensor host = run(path, {{"x_q", x}}, nullptr)[0];
  for (int which = 0; which < 2; ++which) {
    npu::DispatcherOptions o;
    (which == 0 ? o.test_skip_a_sync : o.test_skip_c_sync) = true;
    Rig rig(designs({{16, 64, 32}}), {}, o);
    INFO((which == 0 ? "A" : "C") << " not synced");
    CHECK_FALSE(same_bits(run(path, {{"x_q", x}}, rig.dispatcher.get())[0], host));
    CHECK(rig.dispatcher->counters().device_calls == 1);  // the device "ran": only the output tells
  }
  const std::string empty = scratch_dir("npu_sync_insts") + "/empty.insts";
  std::ofstream(empty, std::ios::binary).close();
  auto d = designs({{16, 64, 32}});
  d[0].insts = empty;
  Rig rig(d);
  const Tensor y = run(path, {{"x_q", x}}, rig.dispatcher.get())[0];
  CHECK_FALSE(same_bits(y, host));
  CHECK(rig.ref->counters().launches == 2);
  CHECK(rig.ref->counters().computed == 0);
}

TEST_CASE("npu: counters equal the bytes computed by hand", "[npu]") {
  Qdq c;
  c.k = 128;
  c.n = 48;
  c.with_q = false;
  const std::string path = save_qdq(c, "npu_bytes");
  Rig rig(designs({{32, 128, 48}}));
  SessionOptions o;
  o.kernel.npu = rig.dispatcher.get();
  Session s(load_onnx(path), default_op_registry(), o);
  // 40 rows: launches of 32 and 8 rows; then 20 rows (one launch; rows 20..31
  // of A held the first call's second launch? no: 8 rows, so 20 synced);
  // then 5 rows (host).
  for (int64_t rows : {40, 20, 5}) s.run({{"x_q", random_x(DType::I8, rows, 128, unsigned(rows))}});
  const uint64_t K = 128, N = 48, M = 32;
  const uint64_t to = M * K           // A zeroed at open
                      + K * N         // B once
                      + 32 * K + 32 * K  // call 1: 32 rows; then 8 rows with rows 8..31 re-zeroed (32 synced)
                      + 20 * K;       // call 2: 20 rows, A dirty up to 8
  const uint64_t from = (32 + 8 + 20) * N * 4;
  const npu::DispatchCounters& cnt = rig.dispatcher->counters();
  CHECK(cnt.bytes_to_device == to);
  CHECK(cnt.bytes_from_device == from);
  CHECK(rig.ref->counters().bytes_to_device == to);
  CHECK(rig.ref->counters().bytes_from_device == from);
  CHECK(cnt.launches == 3);
  CHECK(cnt.padded_rows == (32 - 32) + (32 - 8) + (32 - 20));
  CHECK(cnt.host_row_calls == 1);
  CHECK(cnt.contexts == 1);
  CHECK(rig.ref->counters().contexts == 1);
}

TEST_CASE("npu: the context cap keeps later designs on the host", "[npu]") {
  Qdq c;
  const std::string path = save_qdq(c, "npu_cap");
  npu::DispatcherOptions o;
  o.max_contexts = 1;
  Rig rig(designs({{16, 64, 16}, {16, 64, 32}}), {}, o);
  Qdq c2 = c;
  c2.n = 16;
  const std::string path2 = save_qdq(c2, "npu_cap2");
  SessionOptions so;
  so.kernel.npu = rig.dispatcher.get();
  Session a(load_onnx(path2), default_op_registry(), so);  // opens 16x64x16
  Session b(load_onnx(path), default_op_registry(), so);   // 16x64x32: over the cap
  CHECK(rig.dispatcher->counters().contexts == 1);
  CHECK(rig.lines.count("why=context-limit") == 1);
  const Tensor x = random_x(DType::I8, 16, 64, 1);
  CHECK(same_bits(b.run({{"x_q", x}})[0], run(path, {{"x_q", x}}, nullptr)[0]));
}

TEST_CASE("npu qd8: --int8 GEMMs on the device equal the host's", "[npu]") {
  ModelBuilder b;
  const int64_t k = 192, n = 96;
  b.input("x", kFloat, {-1, k});
  b.output("y", kFloat, {-1, n});
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(k * n));
  for (auto& v : w) v = d(rng);
  b.initializer<float>("w", kFloat, {k, n}, w);
  b.node("MatMul", {"x", "w"}, {"y"}, "proj");
  const std::string path = scratch_dir("npu_qd8") + "/model.onnx";
  b.save(path);
  SessionOptions o;
  o.qd8 = true;
  for (int64_t rows : {3, 16, 50}) {
    Tensor x = Tensor::allocate(DType::F32, {rows, k});
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = d(rng);
    Rig rig(designs({{16, k, n}}));
    CHECK(same_bits(run(path, {{"x", x}}, nullptr, o)[0], run(path, {{"x", x}}, rig.dispatcher.get(), o)[0]));
    CHECK(rig.dispatcher->counters().device_calls == (rows >= 16 ? 1 : 0));
    CHECK(rig.lines.count(rows >= 16 ? "npu_qd8_device" : "npu_qd8_host_rows") == 1);
  }
}

TEST_CASE("npu q4: 4-bit weights re-quantized to int8 per column: device = host qd8 twin and few rows stay 4-bit",
          "[npu]") {
  const int64_t k = 128, n = 64, bs = 32;
  std::mt19937 rng(8);
  std::vector<uint8_t> packed(static_cast<size_t>(k * n / 2));
  std::vector<int> codes(static_cast<size_t>(k * n));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int>(rng() % 16) - 8;
  for (size_t i = 0; i < codes.size(); ++i)
    packed[i / 2] |= static_cast<uint8_t>((codes[i] & 15) << (4 * (i % 2)));
  std::vector<float> sc(static_cast<size_t>((k / bs) * n));
  for (auto& s : sc) s = 0.01f + 0.001f * float(rng() % 20);
  // The 4-bit model, and a float model of the same dequantized weights.
  ModelBuilder q4;
  q4.input("x", kFloat, {-1, k});
  q4.output("y", kFloat, {-1, n});
  q4.initializer("w_q", kInt4, {k, n}, packed.data(), packed.size());
  q4.initializer<float>("w_s", kFloat, {k / bs, n}, sc);
  auto& dq = q4.node("DequantizeLinear", {"w_q", "w_s"}, {"w"}, "dq");
  ModelBuilder::attr_int(dq, "axis", 0);
  ModelBuilder::attr_int(dq, "block_size", bs);
  q4.node("MatMul", {"x", "w"}, {"y"}, "proj");
  const std::string q4_path = scratch_dir("npu_q4") + "/q4.onnx";
  q4.save(q4_path);
  std::vector<float> wf(static_cast<size_t>(k * n));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j)
      wf[static_cast<size_t>(kk * n + j)] =
          static_cast<float>(codes[static_cast<size_t>(kk * n + j)]) * sc[static_cast<size_t>((kk / bs) * n + j)];
  ModelBuilder fl;
  fl.input("x", kFloat, {-1, k});
  fl.output("y", kFloat, {-1, n});
  fl.initializer<float>("w", kFloat, {k, n}, wf);
  fl.node("MatMul", {"x", "w"}, {"y"}, "proj");
  const std::string f_path = scratch_dir("npu_q4_float") + "/float.onnx";
  fl.save(f_path);
  SessionOptions qd8;
  qd8.qd8 = true;
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t rows : {4, 16, 33}) {
    INFO("rows " << rows);
    Tensor x = Tensor::allocate(DType::F32, {rows, k});
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = d(rng);
    Rig rig(designs({{16, k, n}}));
    const Tensor dev = run(q4_path, {{"x", x}}, rig.dispatcher.get())[0];
    if (rows >= 16) {
      // The device's arithmetic is the qd8 GEMM of the dequantized weight.
      CHECK(same_bits(dev, run(f_path, {{"x", x}}, nullptr, qd8)[0]));
      CHECK(rig.dispatcher->counters().device_calls == 1);
      // A dead design: the host twin gives the same bits.
      npu::ReferenceFaults f;
      f.fail_launch = 0;
      Rig dead(designs({{16, k, n}}), f);
      CHECK(same_bits(run(q4_path, {{"x", x}}, dead.dispatcher.get())[0], dev));
      CHECK(dead.lines.count("TIMEOUT") == 1);
    } else {
      CHECK(same_bits(dev, run(q4_path, {{"x", x}}, nullptr)[0]));  // the 4-bit host kernel
      CHECK(rig.lines.count("npu_q4_host_rows m=4") == 1);
    }
  }
}

TEST_CASE("npu designs: the manifest, its short form, and clear errors naming the entry", "[npu]") {
  const std::string dir = scratch_dir("npu_manifest");
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string p = dir + "/" + name;
    std::ofstream(p) << text;
    return p;
  };
  const auto ok = npu::read_manifest(write("ok.json", R"({"designs": [
      {"m": 16, "k": 1024, "n": 2048, "xclbin": "a.xclbin", "insts": "/abs/a.bin"},
      {"m": 32, "k": 1024, "n": 1024, "kernel": "MLIR_AIE2", "b_layout": "nk"}]})"));
  REQUIRE(ok.size() == 2);
  CHECK(ok[0].key() == "16x1024x2048");
  CHECK(ok[0].xclbin == (std::filesystem::path(dir) / "a.xclbin").string());
  CHECK(ok[0].insts == "/abs/a.bin");
  CHECK(ok[0].kernel == "MLIR_AIE");
  CHECK(ok[1].b_layout == npu::BLayout::kNK);
  CHECK(ok[1].kernel == "MLIR_AIE2");
  auto error_of = [&](const std::string& text) {
    try {
      npu::read_manifest(write("bad.json", text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error_of(R"({"designs": [{"m": 16, "k": 64}]})"), Catch::Contains("design 0: needs m, k and n"));
  CHECK_THAT(error_of(R"({"designs": [{"m": 16, "k": 64, "n": 8}, {"m": 16, "k": 64, "n": 8, "colour": 1}]})"),
             Catch::Contains("design 1: unknown key 'colour'"));
  CHECK_THAT(error_of(R"({"designs": [{"m": 16, "k": 64, "n": 8, "b_layout": "kk"}]})"),
             Catch::Contains("b_layout is 'kk'"));
  CHECK_THAT(error_of(R"({"designs": [{"m": -1, "k": 64, "n": 8}]})"), Catch::Contains("'m' must be a positive"));
  CHECK_THAT(error_of(R"({"designs": [{"m": 16, "k": 64, "n": 8}, {"m": 32, "k": 64, "n": 8}]})"),
             Catch::Contains("a second design for k=64 n=8"));
  CHECK_THAT(error_of(R"([1, 2])"), Catch::Contains("expected {\"designs\""));
  CHECK_THAT(error_of("{"), Catch::Contains("not valid JSON"));

  const auto sf = npu::parse_short_form("16x1024x2048=a.xclbin:a.insts,32x64x8");
  REQUIRE(sf.size() == 2);
  CHECK(sf[0].xclbin == "a.xclbin");
  CHECK(sf[0].insts == "a.insts");
  CHECK(sf[1].key() == "32x64x8");
  CHECK_THROWS_WITH(npu::parse_short_form("16x1024"), Catch::Contains("entry 0 '16x1024'"));
  CHECK_THROWS_WITH(npu::parse_short_form("16x8x8,,"), Catch::Contains("empty entry"));
  CHECK_THROWS_WITH(npu::parse_short_form("16x8x8=a.xclbin"), Catch::Contains("XCLBIN:INSTS"));
  CHECK_THROWS_WITH(npu::parse_short_form("16xax8"), Catch::Contains("K is 'a'"));

  const std::string txt = write("i.txt", "0x00000001\n  deadbeef \n\n");
  CHECK(npu::read_instructions(txt) == std::vector<uint32_t>{1, 0xdeadbeef});
  CHECK_THROWS_WITH(npu::read_instructions(write("b.txt", "xyz\n")), Catch::Contains("b.txt:1"));
  CHECK_THROWS_WITH(npu::read_instructions(write("b.bin", "abc")), Catch::Contains("not a whole number"));
}

TEST_CASE("npu plan: mlir-aie build commands respect each target's divisibility rules", "[npu]") {
  std::string why;
  const auto npu16 = npu::mlir_aie_command(16, 1024, 2048, npu::Target::kNpu, why);
  REQUIRE(npu16);
  CHECK_THAT(*npu16, Catch::Contains("whole_array M=16 K=1024 N=2048 m=4 k=64 n=64 n_aie_cols=4 dtype_in=i8"));
  // npu2's 8-row MAC needs M % 32 for the whole array: 16 rows go single-core.
  const auto npu2 = npu::mlir_aie_command(16, 1024, 2048, npu::Target::kNpu2, why);
  REQUIRE(npu2);
  CHECK_THAT(*npu2, Catch::Contains("single_core M=16 K=1024 N=2048 m=16"));
  CHECK_THAT(*npu2, Catch::Contains("devicename=npu2"));
  const auto big = npu::mlir_aie_command(32, 1024, 3072, npu::Target::kNpu2, why);
  REQUIRE(big);
  CHECK_THAT(*big, Catch::Contains("whole_array M=32"));
  CHECK_FALSE(npu::mlir_aie_command(16, 1024, 151936, npu::Target::kNpu, why));
  CHECK_THAT(why, Catch::Contains("64 column blocks"));
  CHECK_FALSE(npu::mlir_aie_command(16, 1020, 64, npu::Target::kNpu, why));
  CHECK_THAT(why, Catch::Contains("K = 1020"));
}

TEST_CASE("npu: --npu xrt where XRT cannot drive an NPU runs on the host and says so once", "[npu][cli]") {
  // Debian's XRT 2.13 has no hw_context; a newer XRT here finds no device.
  // Either way: exit 0, the host's outputs, one line saying why.
  Qdq c;
  const std::string path = save_qdq(c, "npu_cli");
  const std::string dir = scratch_dir("npu_cli_io");
  const Tensor x = random_x(DType::I8, 32, 64, 2);
  auto run_cli = [&](const std::string& mode, const std::string& out) {
    const std::string npy = dir + "/x.npy";
    write_npy(npy, x);
    const std::string cmd = std::string(ONEBIT_CLI) + " run " + path + " --input x_q=" + npy + " -o " + dir + "/" + out +
                            " --npu " + mode + " 2>&1";
    std::string text;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    char buf[512];
    while (size_t got = fread(buf, 1, sizeof buf, p)) text.append(buf, got);
    CHECK(pclose(p) == 0);
    return text;
  };
  const std::string text = run_cli("xrt", "xrt");
  run_cli("off", "off");
  size_t lines = 0;
  for (size_t at = text.find("npu: "); at != std::string::npos; at = text.find("npu: ", at + 1)) ++lines;
  CHECK(lines == 1);
  CHECK_THAT(text, Catch::Contains("GEMMs run on the host"));
  CHECK(same_bits(read_npy(dir + "/xrt/y_q.npy"), read_npy(dir + "/off/y_q.npy")));
}
