// The q4 fusion (graph/passes/q4_fusion.cpp) and its ops (ops/q4_matmul.cpp):
// graphs built in code, run with and without the pass.
//   - act=float: the fused node against the unfused DequantizeLinear +
//     MatMul, both against a float64 reference, within float summation
//     error (2(K+4)·u·Σ|x·w|, as tests/test_q4_gemm.cpp);
//   - int8 modes: the fused node equals a Q4Gemm built directly from the same
//     weights (the kernel's own numerics, bit for bit), and stays near the
//     float reference;
//   - MatMulNBits holding the same weights gives the same outputs bit for bit;
//   - node counts, pass-report counts, and the cases that must not fire.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/dtype.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "base/thread_pool.h"
#include "quant/q4_gemm.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt8 = 3, kFloat16 = 10, kUint4 = 21, kInt4 = 22;

void put_nibble(std::vector<uint8_t>& v, size_t i, int value) {
  v[i / 2] = static_cast<uint8_t>(i % 2 ? (v[i / 2] & 0x0F) | ((value & 15) << 4) : (v[i / 2] & 0xF0) | (value & 15));
}

struct Case {
  int64_t m = 5, k = 96, n = 40;
  int64_t block = 32;        // 0: per channel (or per tensor)
  bool is_signed = true, zero_points = false, f16 = false, bias = false, per_tensor = false;
  int64_t axis = -1;         // DequantizeLinear axis; -1: the natural one (0 blocked, 1 per channel)
  bool weight_is_input = false;  // W_q fed as a graph input (not constant)
};

// Logical weights and the graph holding them.
struct Weights {
  std::vector<int> w;        // [K][N] in W's type
  std::vector<int> z;        // [rows][N]
  std::vector<float> s;      // [rows][N] (float16-rounded when f16)
  std::vector<uint16_t> s16;
  std::vector<float> bias;   // [N]
  std::vector<uint8_t> wq, zq;
  int64_t rows = 1, scols = 1;
};

Weights draw(const Case& c) {
  Weights W;
  W.rows = c.per_tensor ? 1 : c.block ? (c.k + c.block - 1) / c.block : 1;
  W.scols = c.per_tensor ? 1 : c.n;
  std::mt19937 rng(static_cast<unsigned>(c.k * 31 + c.n * 7 + c.block + c.is_signed + 2 * c.zero_points));
  const int lo = c.is_signed ? -8 : 0;
  std::uniform_int_distribution<int> wd(lo, lo + 15);
  std::uniform_real_distribution<float> sd(0.01f, 0.08f), bd(-1.0f, 1.0f);
  W.w.resize(static_cast<size_t>(c.k * c.n));
  for (int& v : W.w) v = wd(rng);
  W.z.assign(static_cast<size_t>(W.rows * W.scols), 0);
  if (c.zero_points)
    for (int& v : W.z) v = wd(rng);
  for (int64_t i = 0; i < W.rows * W.scols; ++i) {
    const float v = sd(rng);
    W.s16.push_back(float_to_half(v));
    W.s.push_back(c.f16 ? half_to_float(W.s16.back()) : v);
  }
  for (int64_t j = 0; j < c.n; ++j) W.bias.push_back(bd(rng));
  W.wq.assign(static_cast<size_t>((c.k * c.n + 1) / 2), 0);
  for (size_t i = 0; i < W.w.size(); ++i) put_nibble(W.wq, i, W.w[i]);
  W.zq.assign(static_cast<size_t>((W.rows * W.scols + 1) / 2), 0);
  for (size_t i = 0; i < W.z.size(); ++i) put_nibble(W.zq, i, W.z[i]);
  return W;
}

// dequant(W)[k][n] per DequantizeLinear.
double dequant(const Case& c, const Weights& W, int64_t k, int64_t n) {
  const int64_t r = c.per_tensor || !c.block ? 0 : k / c.block, col = c.per_tensor ? 0 : n;
  const size_t si = static_cast<size_t>(r * W.scols + col);
  return double(W.w[static_cast<size_t>(k * c.n + n)] - W.z[si]) * double(W.s[si]);
}

ModelBuilder build(const Case& c, const Weights& W) {
  ModelBuilder b;
  b.input("x", kFloat, {c.m, c.k});
  b.output("y", kFloat, {c.m, c.n});
  const int32_t wt = c.is_signed ? kInt4 : kUint4;
  if (c.weight_is_input) b.input("w_q", wt, {c.k, c.n});
  else b.initializer("w_q", wt, {c.k, c.n}, W.wq.data(), W.wq.size());
  std::vector<int64_t> sdims;
  if (!c.per_tensor) sdims = c.block ? std::vector<int64_t>{W.rows, c.n} : std::vector<int64_t>{c.n};
  if (c.f16) b.initializer<uint16_t>("w_scale", kFloat16, sdims, W.s16);
  else b.initializer<float>("w_scale", kFloat, sdims, W.s);
  std::vector<std::string> dq_in = {"w_q", "w_scale"};
  if (c.zero_points) {
    b.initializer("w_zp", wt, sdims, W.zq.data(), W.zq.size());
    dq_in.push_back("w_zp");
  }
  auto& dq = b.node("DequantizeLinear", dq_in, {"w_dq"}, "dq_w");
  if (!c.per_tensor) ModelBuilder::attr_int(dq, "axis", c.axis >= 0 ? c.axis : c.block ? 0 : 1);
  if (c.block) ModelBuilder::attr_int(dq, "block_size", c.block);
  std::string w = "w_dq";
  if (c.f16) {
    auto& cast = b.node("Cast", {"w_dq"}, {"w_f32"}, "cast_w");
    ModelBuilder::attr_int(cast, "to", kFloat);
    w = "w_f32";
  }
  b.node("MatMul", {"x", w}, {c.bias ? "mm" : "y"}, "matmul");
  if (c.bias) {
    b.initializer<float>("bias", kFloat, {c.n}, W.bias);
    b.node("Add", {"mm", "bias"}, {"y"}, "add_bias");
  }
  return b;
}

Tensor input(const Case& c) {
  Tensor t = Tensor::allocate(DType::F32, {c.m, c.k});
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = d(rng) * (i % 11 == 0 ? 8.0f : 1.0f);  // some outliers
  return t;
}

struct Outcome {
  Tensor y;
  size_t nodes;
  PassReport report;
};

Outcome run(const std::string& path, const std::vector<NamedTensor>& in, bool fuse, const std::string& act = "float",
            bool basic = false) {
  SessionOptions opts;
  opts.q4_fusion = fuse;
  opts.basic = basic;
  opts.kernel.act_precision = parse_act_precision(act).value();
  opts.threads = 2;
  Session s(load_onnx(path), default_op_registry(), opts);
  auto out = s.run(in);
  return {out[0], s.graph().nodes.size(), s.pass_report()};
}

std::string save(const Case& c, const Weights& W, const std::string& name) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  build(c, W).save(path);
  return path;
}

// The activation quantization error bound for x[i][k] under `act` (0 for
// float), quant/act_quant.h: int8-row quantizes the row over [min(x, 0),
// max(x, 0)] in 255 steps, a full step since the rounded zero point can push
// an extreme by another half; int8-block each K block (the weight's, or 32
// per channel) symmetrically in 127 steps, half a step.
double half_step(const Case& c, const Tensor& x, int64_t i, int64_t k, const std::string& act) {
  const float* row = x.data<float>() + i * c.k;
  if (act == "int8-row") {
    double lo = 0, hi = 0;
    for (int64_t t = 0; t < c.k; ++t) {
      lo = std::min(lo, double(row[t]));
      hi = std::max(hi, double(row[t]));
    }
    return (hi - lo) / 255.0;
  }
  if (act == "int8-block") {
    const int64_t bs = c.block ? c.block : 32, b0 = k / bs * bs;
    double amax = 0;
    for (int64_t t = b0; t < std::min(c.k, b0 + bs); ++t) amax = std::max(amax, std::fabs(double(row[t])));
    return amax / 127.0 / 2.0;
  }
  return 0.0;
}

// y within float summation error (2(K+4)·u·Σ|x·w|) of the float64 reference
// x·dequant(W) + bias, plus, for int8 activations, half a step per product.
// f16_weights: the reference rounds each dequantized weight to float16, as an
// unfused DequantizeLinear with float16 scales does (its output is float16).
void check_near_reference(const Case& c, const Weights& W, const Tensor& x, const Tensor& y,
                          const std::string& act = "float", bool f16_weights = false) {
  REQUIRE(y.shape() == Shape{c.m, c.n});
  const double u = std::ldexp(1.0, -24);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = c.bias ? W.bias[static_cast<size_t>(j)] : 0.0, mag = std::fabs(ref), act_err = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        double w = dequant(c, W, k, j);
        if (f16_weights) w = half_to_float(float_to_half(static_cast<float>(w)));
        const double p = double(x.data<float>()[i * c.k + k]) * w;
        ref += p;
        mag += std::fabs(p);
        act_err += half_step(c, x, i, k, act) * std::fabs(w);
      }
      const double got = y.data<float>()[i * c.n + j];
      const double tol = 2.0 * double(c.k + 4) * u * mag + 1.01 * act_err + 1e-30;
      INFO("row " << i << " col " << j << " got " << got << " ref " << ref << " tol " << tol);
      REQUIRE(std::fabs(got - ref) <= tol);
    }
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

Q4Act act_of(const std::string& s) {
  return s == "int8-row" ? Q4Act::kInt8Row : s == "int8-block" ? Q4Act::kInt8Block : Q4Act::kFloat;
}

// The same weights straight through Q4Gemm: the kernel's own numerics.
Tensor direct_q4(const Case& c, const Weights& W, const Tensor& x, Q4Act act) {
  Q4OnnxWeight q;
  q.k = static_cast<size_t>(c.k);
  q.n = static_cast<size_t>(c.n);
  q.is_signed = c.is_signed;
  q.data = W.wq.data();
  q.block_size = static_cast<size_t>(c.block);
  q.scale_type = c.f16 ? Q4FloatType::kF16 : Q4FloatType::kF32;
  q.scales = c.f16 ? static_cast<const void*>(W.s16.data()) : W.s.data();
  q.zero_points = c.zero_points ? W.zq.data() : nullptr;
  q.uint4_zero_point = 0;
  Q4GemmOptions opt;
  opt.act = act;
  opt.bias = c.bias ? W.bias.data() : nullptr;
  const Q4Gemm gemm(q4_gemm_config(), q, opt);
  Tensor y = Tensor::allocate(DType::F32, {c.m, c.n});
  std::vector<uint8_t> ws(gemm.workspace_bytes(static_cast<size_t>(c.m)) + 64);
  void* aligned = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
  ThreadPool pool(2);
  gemm.run(static_cast<size_t>(c.m), x.data<float>(), q.k, y.data<float>(), q.n, aligned, &pool);
  return y;
}

// The fused graph against the unfused one, the reference and the kernel.
void check_fuses(const Case& c, const std::string& name, size_t fused_nodes = 1) {
  const Weights W = draw(c);
  const std::string path = save(c, W, name);
  const Tensor x = input(c);
  const Outcome plain = run(path, {{"x", x}}, false);
  const Outcome fused = run(path, {{"x", x}}, true);
  CHECK(fused.report.get("q4_fused") == 1);
  CHECK(fused.report.get("q4_refused") == 0);
  CHECK(fused.report.get("q4_fused_with_bias") == (c.bias ? 1 : 0));
  CHECK(fused.report.get("qdq_refused") == 0);  // the QDQ pass leaves 4-bit weights alone
  CHECK(fused.nodes == fused_nodes);
  CHECK(plain.nodes == 2 + (c.f16 ? 1u : 0u) + (c.bias ? 1u : 0u));
  check_near_reference(c, W, x, plain.y, "float", c.f16);
  check_near_reference(c, W, x, fused.y);  // float16 scales: the fused node skips the graph's float16 rounding
  if (!c.per_tensor) CHECK(bit_equal(fused.y, direct_q4(c, W, x, Q4Act::kFloat)));
  for (const char* act : {"int8-row", "int8-block"}) {
    INFO("act " << act);
    const Outcome q = run(path, {{"x", x}}, true, act);
    if (!c.per_tensor) CHECK(bit_equal(q.y, direct_q4(c, W, x, act_of(act))));
    check_near_reference(c, W, x, q.y, act);
  }
}

}  // namespace

TEST_CASE("q4 fusion: int4 blocked along K becomes one node", "[fusion][q4]") {
  Case c;
  check_fuses(c, "q4_block32");
}

TEST_CASE("q4 fusion: uint4 with zero points, K not a multiple of the block, odd N", "[fusion][q4]") {
  Case c;
  c.is_signed = false;
  c.zero_points = true;
  c.k = 80;
  c.n = 37;
  c.m = 3;
  check_fuses(c, "q4_uint4_zp");
}

TEST_CASE("q4 fusion: one row (the decode path), block 128", "[fusion][q4]") {
  Case c;
  c.m = 1;
  c.k = 300;
  c.n = 70;
  c.block = 128;
  check_fuses(c, "q4_one_row");
}

TEST_CASE("q4 fusion: per channel with zero points and a folded bias Add", "[fusion][q4]") {
  Case c;
  c.block = 0;
  c.zero_points = true;
  c.bias = true;
  check_fuses(c, "q4_per_channel_bias");
}

TEST_CASE("q4 fusion: per-tensor scale and zero point", "[fusion][q4]") {
  Case c;
  c.block = 0;
  c.per_tensor = true;
  c.zero_points = true;
  c.is_signed = false;
  check_fuses(c, "q4_per_tensor");
}

TEST_CASE("q4 fusion: float16 scales through a Cast to float", "[fusion][q4]") {
  Case c;
  c.f16 = true;
  c.block = 64;
  c.k = 128;
  check_fuses(c, "q4_f16");
}

TEST_CASE("q4 fusion: a dequantized weight another node reads stays for it", "[fusion][q4]") {
  Case c;
  const Weights W = draw(c);
  ModelBuilder b = build(c, W);
  auto* out = b.graph().add_output();  // the float weight itself is a graph output
  out->set_name("w_dq");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(kFloat);
  const std::string path = scratch_dir("q4_shared_dq") + "/model.onnx";
  b.save(path);
  const Outcome fused = run(path, {{"x", input(c)}}, true);
  CHECK(fused.report.get("q4_fused") == 1);
  CHECK(fused.nodes == 2);  // Q4MatMul + the DequantizeLinear the output needs
  check_near_reference(c, W, input(c), fused.y);
}

TEST_CASE("q4: MatMulNBits holding the same weights gives the same output", "[fusion][q4][matmulnbits]") {
  for (bool zp : {false, true}) {
    Case c;
    c.is_signed = false;  // MatMulNBits codes are unsigned
    c.zero_points = zp;
    c.k = 80;
    c.n = 37;
    c.bias = zp;
    const Weights W0 = draw(c);
    Weights W = W0;
    if (!zp) {  // without zero points MatMulNBits means 8; the DequantizeLinear graph says so explicitly
      c.zero_points = true;
      std::fill(W.z.begin(), W.z.end(), 8);
      for (size_t i = 0; i < W.z.size(); ++i) put_nibble(W.zq, i, 8);
    }
    const std::string dq_path = save(c, W, zp ? "q4_nbits_dq_zp" : "q4_nbits_dq");

    // MatMulNBits: B [N][blocks][bs/2], scales [N·blocks], zero points packed [N][ceil(blocks/2)].
    const int64_t blocks = W.rows, blob = c.block / 2, zbytes = (blocks + 1) / 2;
    std::vector<uint8_t> bq(static_cast<size_t>(c.n * blocks * blob), 0), zq(static_cast<size_t>(c.n * zbytes), 0);
    std::vector<float> sc(static_cast<size_t>(c.n * blocks));
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t k = 0; k < c.k; ++k) {
        const size_t byte = static_cast<size_t>((j * blocks + k / c.block) * blob + (k % c.block) / 2);
        const int v = W.w[static_cast<size_t>(k * c.n + j)];
        bq[byte] = static_cast<uint8_t>(k % 2 ? (bq[byte] & 0x0F) | (v << 4) : (bq[byte] & 0xF0) | v);
      }
      for (int64_t r = 0; r < blocks; ++r) {
        sc[static_cast<size_t>(j * blocks + r)] = W.s[static_cast<size_t>(r * c.n + j)];
        const int z = W.z[static_cast<size_t>(r * c.n + j)];
        uint8_t& byte = zq[static_cast<size_t>(j * zbytes + r / 2)];
        byte = static_cast<uint8_t>(r % 2 ? (byte & 0x0F) | (z << 4) : (byte & 0xF0) | z);
      }
    }
    ModelBuilder b;
    auto* ms = b.proto().add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
    b.input("x", kFloat, {c.m, c.k}).output("y", kFloat, {c.m, c.n});
    b.initializer("B", 2, {c.n, blocks, blob}, bq.data(), bq.size());
    b.initializer<float>("scales", kFloat, {c.n * blocks}, sc);
    std::vector<std::string> in = {"x", "B", "scales"};
    if (zp) {
      b.initializer("zero_points", 2, {c.n * zbytes}, zq.data(), zq.size());
      in.push_back("zero_points");
      in.push_back("");  // g_idx
      b.initializer<float>("bias", kFloat, {c.n}, W.bias);
      in.push_back("bias");
    }
    auto& node = b.node("MatMulNBits", in, {"y"}, "nbits");
    node.set_domain("com.microsoft");
    ModelBuilder::attr_int(node, "K", c.k);
    ModelBuilder::attr_int(node, "N", c.n);
    ModelBuilder::attr_int(node, "bits", 4);
    ModelBuilder::attr_int(node, "block_size", c.block);
    const std::string nb_path = scratch_dir(zp ? "q4_nbits_zp" : "q4_nbits") + "/model.onnx";
    b.save(nb_path);

    const Tensor x = input(c);
    for (const char* act : {"float", "int8-row", "int8-block"}) {
      INFO("zero points " << zp << " act " << act);
      const Outcome a = run(dq_path, {{"x", x}}, true, act);
      const Outcome n = run(nb_path, {{"x", x}}, true, act);
      CHECK(n.nodes == 1);
      CHECK(bit_equal(a.y, n.y));
      // --basic runs no 4-bit pass; MatMulNBits still takes the session's precision.
      CHECK(bit_equal(a.y, run(nb_path, {{"x", x}}, true, act, /*basic=*/true).y));
    }
    check_near_reference(c, W, x, run(nb_path, {{"x", x}}, true).y);
  }
}

TEST_CASE("q4 fusion must not fire: blocks along N", "[fusion][q4][must-not-fire]") {
  Case c;
  c.axis = 1;  // block_size with axis 1: scale [K, N/bs]
  c.k = 64;
  c.n = 64;
  ModelBuilder b;
  b.input("x", kFloat, {c.m, c.k}).output("y", kFloat, {c.m, c.n});
  std::vector<uint8_t> wq(static_cast<size_t>(c.k * c.n / 2), 0x21);
  b.initializer("w_q", kInt4, {c.k, c.n}, wq.data(), wq.size());
  b.initializer<float>("w_scale", kFloat, {c.k, c.n / 32}, std::vector<float>(static_cast<size_t>(c.k * c.n / 32), 0.5f));
  auto& dq = b.node("DequantizeLinear", {"w_q", "w_scale"}, {"w_dq"}, "dq_w");
  ModelBuilder::attr_int(dq, "axis", 1);
  ModelBuilder::attr_int(dq, "block_size", 32);
  b.node("MatMul", {"x", "w_dq"}, {"y"}, "matmul");
  const std::string path = scratch_dir("q4_along_n") + "/model.onnx";
  b.save(path);
  const Outcome fused = run(path, {{"x", input(c)}}, true), plain = run(path, {{"x", input(c)}}, false);
  CHECK(fused.report.get("q4_fused") == 0);
  CHECK(fused.report.get("q4_refused:blocked_along_n") == 1);
  CHECK(fused.nodes == 2);
  CHECK(bit_equal(fused.y, plain.y));
}

TEST_CASE("q4 fusion must not fire: a weight that is not constant", "[fusion][q4][must-not-fire]") {
  Case c;
  c.weight_is_input = true;
  const Weights W = draw(c);
  const std::string path = save(c, W, "q4_not_constant");
  Tensor wq = Tensor::allocate(DType::I4, {c.k, c.n});
  std::memcpy(wq.raw(), W.wq.data(), W.wq.size());
  const Outcome fused = run(path, {{"x", input(c)}, {"w_q", wq}}, true);
  CHECK(fused.report.get("q4_refused:weight_not_constant") == 1);
  CHECK(fused.nodes == 2);
  check_near_reference(c, W, input(c), fused.y);
}

TEST_CASE("q4 fusion must not fire: a block size the GEMM cannot pack", "[fusion][q4][must-not-fire]") {
  Case c;
  c.block = 8;
  c.k = 32;
  const Weights W = draw(c);
  const std::string path = save(c, W, "q4_block8");
  const Outcome fused = run(path, {{"x", input(c)}}, true);
  CHECK(fused.report.get("q4_refused:block_size_unsupported") == 1);
  CHECK(fused.nodes == 2);
  check_near_reference(c, W, input(c), fused.y);
}

TEST_CASE("q4 fusion must not fire: int8 weights and float MatMuls", "[fusion][q4][must-not-fire]") {
  ModelBuilder b;
  b.input("x", kFloat, {2, 4}).output("y", kFloat, {2, 3}).output("z", kFloat, {2, 3});
  b.initializer<int8_t>("w_q", kInt8, {4, 3}, std::vector<int8_t>(12, 3));
  b.initializer<float>("w_scale", kFloat, {}, {0.5f});
  b.initializer<float>("w", kFloat, {4, 3}, std::vector<float>(12, 0.25f));
  b.node("DequantizeLinear", {"w_q", "w_scale"}, {"w_dq"}, "dq_w");
  b.node("MatMul", {"x", "w_dq"}, {"y"}, "matmul_int8");
  b.node("MatMul", {"x", "w"}, {"z"}, "matmul_float");
  const std::string path = scratch_dir("q4_int8") + "/model.onnx";
  b.save(path);
  Tensor x = Tensor::allocate(DType::F32, {2, 4});
  for (int64_t i = 0; i < 8; ++i) x.data<float>()[i] = float(i);
  const Outcome fused = run(path, {{"x", x}}, true);
  CHECK(fused.report.get("q4_fused") == 0);
  CHECK(fused.report.get("q4_refused") == 1);
  CHECK(fused.report.get("q4_refused:weight_dtype_int8") == 1);
  CHECK(fused.y.data<float>()[0] == Approx(0 * 1.5 + 1 * 1.5 + 2 * 1.5 + 3 * 1.5));
}

TEST_CASE("q4 fusion: an Add whose other input is not a constant [N] stays", "[fusion][q4][must-not-fire]") {
  Case c;
  const Weights W = draw(c);
  ModelBuilder b = build(c, W);
  b.graph().mutable_output(0)->set_name("y2");
  b.input("r", kFloat, {c.m, c.n});
  b.node("Add", {"y", "r"}, {"y2"}, "add_residual");
  const std::string path = scratch_dir("q4_residual") + "/model.onnx";
  b.save(path);
  Tensor r = Tensor::allocate(DType::F32, {c.m, c.n});
  const Outcome fused = run(path, {{"x", input(c)}, {"r", r}}, true);
  CHECK(fused.report.get("q4_fused") == 1);
  CHECK(fused.report.get("q4_fused_with_bias") == 0);
  CHECK(fused.nodes == 2);
  check_near_reference(c, W, input(c), fused.y);
}

TEST_CASE("q4 fusion: auto activation precision is int8-block", "[fusion][q4]") {
  // docs/parity.md "Q4NX" has the measurements behind the choice.
  Case c;
  const Weights W = draw(c);
  const std::string path = save(c, W, "q4_auto");
  const Tensor x = input(c);
  CHECK(bit_equal(run(path, {{"x", x}}, true, "auto").y, direct_q4(c, W, x, Q4Act::kInt8Block)));
}

TEST_CASE("q4 fusion: switched off, and the act precision names", "[fusion][q4]") {
  Case c;
  const Weights W = draw(c);
  const std::string path = save(c, W, "q4_switches");
  const Outcome off = run(path, {{"x", input(c)}}, false);
  CHECK(off.report.get("q4_refused:disabled_by_ONEBIT_Q4=0") == 1);
  CHECK(off.nodes == 2);
  for (ActPrecision a : kActPrecisions) CHECK(parse_act_precision(act_precision_name(a)) == a);
  CHECK_FALSE(parse_act_precision("int4").has_value());
}

namespace {

// x read by four DequantizeLinear(4-bit) -> MatMul projections: three with
// block 32 (int4; uint4 with zero points; int4 with a bias Add), which the
// sibling pass groups into one Q4MatMul, and one with block 64, which it
// must leave alone.
std::string save_siblings(int64_t m, int64_t k) {
  ModelBuilder b;
  b.input("x", kFloat, {m, k});
  struct Member { int64_t n, block; bool is_signed, zp, bias; };
  const Member members[] = {{48, 32, true, false, false}, {16, 32, false, true, false}, {70, 32, true, false, true},
                            {32, 64, true, false, false}};
  int i = 0;
  for (const Member& mb : members) {
    Case c;
    c.k = k;
    c.n = mb.n;
    c.block = mb.block;
    c.is_signed = mb.is_signed;
    c.zero_points = mb.zp;
    const Weights W = draw(c);
    const std::string id = std::to_string(i++), wt_name = "w_q" + id, s_name = "w_s" + id, y = "y" + id;
    const int32_t wt = mb.is_signed ? kInt4 : kUint4;
    b.initializer(wt_name, wt, {k, mb.n}, W.wq.data(), W.wq.size());
    b.initializer<float>(s_name, kFloat, {W.rows, mb.n}, W.s);
    std::vector<std::string> dq_in = {wt_name, s_name};
    if (mb.zp) {
      b.initializer("w_zp" + id, wt, {W.rows, mb.n}, W.zq.data(), W.zq.size());
      dq_in.push_back("w_zp" + id);
    }
    auto& dq = b.node("DequantizeLinear", dq_in, {"w_dq" + id}, "dq" + id);
    ModelBuilder::attr_int(dq, "axis", 0);
    ModelBuilder::attr_int(dq, "block_size", mb.block);
    b.node("MatMul", {"x", "w_dq" + id}, {mb.bias ? "mm" + id : y}, "matmul" + id);
    if (mb.bias) {
      b.initializer<float>("bias" + id, kFloat, {mb.n}, W.bias);
      b.node("Add", {"mm" + id, "bias" + id}, {y}, "add" + id);
    }
    b.output(y, kFloat, {m, mb.n});
  }
  const std::string path = scratch_dir("q4_siblings_m" + std::to_string(m)) + "/model.onnx";
  b.save(path);
  return path;
}

}  // namespace

// The model at `path` with every pass (grouped) or stopped before the
// sibling grouping, at activation precision `act` on `threads` threads.
Session sibling_session(const std::string& path, const char* act, int threads, bool grouped) {
  SessionOptions o;
  o.threads = threads;
  o.kernel.act_precision = parse_act_precision(act).value();
  if (!grouped) o.stop_after_pass = test::pass_index("group-sibling-matmuls");
  return Session(load_onnx(path), default_op_registry(), o);
}

TEST_CASE("sibling grouping: Q4MatMuls on one input share one call, the same bits", "[fusion][q4][siblings]") {
  const int64_t k = 100;
  for (int64_t m : {1, 6, 40}) {
    const std::string path = save_siblings(m, k);
    Case c;
    c.m = m;
    c.k = k;
    const Tensor x = input(c);
    for (const char* act : {"int8-block", "int8-row", "float"})
      for (int threads : {1, 2}) {
        INFO("m " << m << " act " << act << " threads " << threads);
        Session grouped = sibling_session(path, act, threads, true);
        Session plain = sibling_session(path, act, threads, false);
        CHECK(grouped.pass_report().get("q4_fused") == 4);
        CHECK(grouped.pass_report().get("siblings_fused") == 1);
        CHECK(grouped.pass_report().get("siblings_fused_q4_gemms") == 3);
        REQUIRE(grouped.graph().nodes.size() == 2);  // the group of three and the block-64 one
        // Stopped before it, the plain run keeps the dead DequantizeLinears too.
        CHECK(std::count_if(plain.graph().nodes.begin(), plain.graph().nodes.end(),
                            [](const Node& n) { return n.op_type == "Q4MatMul"; }) == 4);
        const std::vector<Tensor> a = grouped.run({{"x", x}}), b = plain.run({{"x", x}});
        REQUIRE(a.size() == 4);
        for (size_t o = 0; o < a.size(); ++o) {
          INFO("output " << o);
          REQUIRE(a[o].shape() == b[o].shape());
          CHECK(std::memcmp(a[o].raw(), b[o].raw(), a[o].bytes()) == 0);
        }
      }
  }
}

namespace {

// One MatMulNBits on x, written into `b`: random codes and scales (A's
// type), packed uint8 zero points and a bias when asked.
struct NBitsMember {
  int64_t n, block, accuracy_level, bits;
  bool zero_points, bias;
};

void add_nbits(ModelBuilder& b, const std::string& id, int64_t k, const NBitsMember& w, int32_t t, std::mt19937& rng) {
  const int64_t blocks = (k + w.block - 1) / w.block, blob = w.block * w.bits / 8;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), bias(-1.0f, 1.0f);
  std::vector<uint8_t> codes(static_cast<size_t>(w.n * blocks * blob));
  for (uint8_t& c : codes) c = static_cast<uint8_t>(byte(rng));
  b.initializer("B" + id, 2, {w.n, blocks, blob}, codes.data(), codes.size());
  const auto floats = [&](const std::string& name, int64_t count, auto& dist) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v) f = dist(rng);
    if (t == kFloat) {
      b.initializer<float>(name, kFloat, {count}, v);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
      b.initializer<uint16_t>(name, t, {count}, h);
    }
  };
  floats("scales" + id, w.n * blocks, scale);
  std::vector<std::string> in = {"x", "B" + id, "scales" + id};
  if (w.zero_points || w.bias) {
    if (w.zero_points) {
      const int64_t zbytes = w.bits == 4 ? (blocks + 1) / 2 : blocks;
      std::vector<uint8_t> zq(static_cast<size_t>(w.n * zbytes));
      for (uint8_t& z : zq) z = static_cast<uint8_t>(byte(rng));
      b.initializer("zp" + id, 2, {w.n * zbytes}, zq.data(), zq.size());
    }
    in.push_back(w.zero_points ? "zp" + id : "");
    in.push_back("");  // g_idx
    if (w.bias) floats("bias" + id, w.n, bias);
    if (w.bias) in.push_back("bias" + id);
  }
  auto& node = b.node("MatMulNBits", in, {"y" + id}, "nbits" + id);
  node.set_domain("com.microsoft");
  ModelBuilder::attr_int(node, "K", k);
  ModelBuilder::attr_int(node, "N", w.n);
  ModelBuilder::attr_int(node, "bits", w.bits);
  ModelBuilder::attr_int(node, "block_size", w.block);
  ModelBuilder::attr_int(node, "accuracy_level", w.accuracy_level);
}

}  // namespace

// transformers.js' q4 files and onnxruntime-genai's int4 builds keep q, k,
// v (and gate, up) as separate MatMulNBits on one input: the three of one
// K, block size and accuracy level become one MatMulNBitsGroup, each output
// bit for bit its own node's, float32 or float16 A, with or without zero
// points and bias. Not taken: another block size, another accuracy level
// (its own activation precision), 8 bits.
TEST_CASE("sibling grouping: MatMulNBits on one input share one call, the same bits", "[fusion][q4][siblings]") {
  const int64_t k = 96;
  const std::vector<NBitsMember> members = {{37, 32, 4, 4, false, false}, {16, 32, 4, 4, true, true},
                                            {29, 32, 4, 4, false, true},  {20, 64, 4, 4, false, false},
                                            {8, 32, 1, 4, false, false},  {8, 32, 4, 8, true, false}};
  for (const int32_t t : {kFloat, 10})
    for (const int64_t m : {1, 5}) {
      std::mt19937 rng(static_cast<unsigned>(m * 7 + t));
      ModelBuilder b;
      auto* ms = b.proto().add_opset_import();
      ms->set_domain("com.microsoft");
      ms->set_version(1);
      b.input("x", t, {m, k});
      for (size_t i = 0; i < members.size(); ++i) {
        add_nbits(b, std::to_string(i), k, members[i], t, rng);
        b.output("y" + std::to_string(i), t, {m, members[i].n});
      }
      const std::string path =
          scratch_dir("nbits_siblings_" + std::to_string(t) + "_m" + std::to_string(m)) + "/model.onnx";
      b.save(path);
      Tensor x = Tensor::allocate(t == kFloat ? DType::F32 : DType::F16, {m, k});
      std::uniform_real_distribution<float> u(-2.0f, 2.0f);
      for (int64_t i = 0; i < m * k; ++i) {
        if (t == kFloat) x.data<float>()[i] = u(rng);
        else x.data<uint16_t>()[i] = float_to_half(u(rng));
      }
      for (const char* act : {"auto", "int8-row", "float"})
        for (int threads : {1, 2}) {
          INFO("A " << (t == kFloat ? "float32" : "float16") << " m " << m << " act " << act << " threads " << threads);
          Session grouped = sibling_session(path, act, threads, true);
          Session plain = sibling_session(path, act, threads, false);
          CHECK(grouped.pass_report().get("siblings_fused") == 1);
          CHECK(grouped.pass_report().get("siblings_fused_nbits_gemms") == 3);
          CHECK(std::count_if(grouped.graph().nodes.begin(), grouped.graph().nodes.end(),
                              [](const Node& n) { return n.op_type == "MatMulNBitsGroup"; }) == 1);
          CHECK(std::count_if(grouped.graph().nodes.begin(), grouped.graph().nodes.end(),
                              [](const Node& n) { return n.op_type == "MatMulNBits"; }) == 3);
          const std::vector<Tensor> a = grouped.run({{"x", x}}), p = plain.run({{"x", x}});
          REQUIRE(a.size() == members.size());
          for (size_t o = 0; o < a.size(); ++o) {
            INFO("output " << o);
            REQUIRE(a[o].shape() == p[o].shape());
            CHECK(std::memcmp(a[o].raw(), p[o].raw(), a[o].bytes()) == 0);
          }
        }
    }
}
