// float16 weights under float32 compute (graph/passes/f16_weight_matmul.cpp,
// ops/f16w_matmul.cpp): MatMul(x, Cast(W16)) built in code and run with and
// without the pass (the same products of the same float16 values), node
// counts, the cases that must not fire, and the microkernel families
// against the scalar reference over tile edges.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/random_util.h"
#include "base/cpu_features.h"
#include "base/dtype.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "pass_test_util.h"
#include "ops/register_ops.h"
#include "quant/ukernels/kernel_config.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

using onebit::test::randn;

namespace {

constexpr int32_t kFloat = 1, kFloat16 = 10;

std::vector<uint16_t> halves(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half(v[i]);
  return h;
}

Graph build(int64_t m, int64_t k, int64_t n, bool cast_is_output) {
  ModelBuilder b;
  b.input("x", kFloat, {m, k}).output("y", kFloat, {m, n});
  b.initializer<uint16_t>("w16", kFloat16, {k, n}, halves(randn(static_cast<size_t>(k * n), 2)));
  ModelBuilder::attr_int(b.node("Cast", {"w16"}, {"w"}), "to", kFloat);
  b.node("MatMul", {"x", "w"}, {"y"});
  if (cast_is_output) b.output("w", kFloat, {k, n});
  const std::string path = scratch_dir("f16w") + "/model.onnx";
  b.save(path);
  return load_onnx(path);
}

// Options that stop the pass list just before `pass`.
SessionOptions before_pass(const char* pass = "f16-weight-matmul", int threads = 0) {
  SessionOptions o;
  if (threads > 0) o.threads = threads;
  o.stop_after_pass = test::pass_index(pass);
  return o;
}

}  // namespace

TEST_CASE("f16w: MatMul of a Cast float16 weight runs on the float16 panels", "[fusion][f16w]") {
  for (int64_t m : {1, 3, 7}) {
    const int64_t k = 37, n = 45;  // n past two panels, k odd
    Session fused(build(m, k, n, false), default_op_registry());
    Session plain(build(m, k, n, false), default_op_registry(), before_pass());
    CHECK(fused.pass_report().get("f16w_fused") == 1);
    CHECK(fused.graph().nodes.size() == 1);
    CHECK(fused.graph().nodes[0].op_type == "F16wMatMul");
    Tensor x = Tensor::allocate(DType::F32, {m, k});
    const std::vector<float> xv = randn(static_cast<size_t>(m * k), 7);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    const Tensor a = fused.run({{"x", x}})[0], b = plain.run({{"x", x}})[0];
    REQUIRE(a.shape() == b.shape());
    for (int64_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a.data<float>()[i] - b.data<float>()[i]) <= 1e-4f);
  }
}

TEST_CASE("f16w: a float16 model's MatMul on a transposed float16 table (a tied LM head)", "[fusion][f16w]") {
  // MatMul(x16, Transpose(W16 [N, K])): F16wMatMul packs W [N, K] straight, float16 in and out.
  for (int64_t m : {1, 6}) {
    const int64_t k = 37, n = 45;
    ModelBuilder b;
    b.input("x", kFloat16, {m, k}).output("y", kFloat16, {m, n});
    const std::vector<float> w = randn(static_cast<size_t>(n * k), 3);
    b.initializer<uint16_t>("table", kFloat16, {n, k}, halves(w));
    ModelBuilder::attr_ints(b.node("Transpose", {"table"}, {"wt"}), "perm", {1, 0});
    b.node("MatMul", {"x", "wt"}, {"y"});
    const std::string path = scratch_dir("f16w_t") + "/model.onnx";
    b.save(path);
    Session fused(load_onnx(path), default_op_registry());
    CHECK(fused.pass_report().get("f16w_fused") == 1);
    REQUIRE(fused.graph().nodes.size() == 1);
    CHECK(fused.graph().nodes[0].op_type == "F16wMatMul");
    Tensor x = Tensor::allocate(DType::F16, {m, k});
    const std::vector<float> xv = randn(static_cast<size_t>(m * k), 8);
    for (size_t i = 0; i < xv.size(); ++i) x.data<uint16_t>()[i] = float_to_half(xv[i]);
    const Tensor y = fused.run({{"x", x}})[0];
    REQUIRE(y.dtype() == DType::F16);
    REQUIRE(y.shape() == Shape{m, n});
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i)
          want += double(half_to_float(x.data<uint16_t>()[r * k + i])) * half_to_float(float_to_half(w[static_cast<size_t>(j * k + i)]));
        CHECK(std::fabs(half_to_float(y.data<uint16_t>()[r * n + j]) - want) <= 2e-3 * (1 + std::fabs(want)));
      }
  }
}

TEST_CASE("f16w must not fire when the widened weight is read elsewhere", "[fusion][f16w][must-not-fire]") {
  Session s(build(2, 16, 16, true), default_op_registry());
  CHECK(s.pass_report().get("f16w_fused") == 0);
  CHECK(s.pass_report().get("f16w_refused:cast_read_elsewhere") == 1);
}

TEST_CASE("f16w microkernels match the scalar reference over tile edges", "[ukernel][f16w]") {
  const F16wGemmConfig* ref = f16w_gemm_config_for(Isa::Scalar);
  REQUIRE(ref);
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    const F16wGemmConfig* c = f16w_gemm_config_for(isa);
    if (!c) continue;  // this CPU lacks it
    for (size_t m = 1; m <= kF16wMR; ++m)
      for (size_t k : {size_t{1}, size_t{15}, size_t{64}, size_t{129}})
        for (size_t nc : {size_t{16}, size_t{5}}) {
          const std::vector<float> a = randn(m * k, static_cast<unsigned>(m * 100 + k));
          const std::vector<uint16_t> b = halves(randn(k * kF16wNR, static_cast<unsigned>(k)));
          std::vector<float> want(m * 16, -1.f), got(m * 16, -1.f);
          ref->gemm(m, k, a.data(), k, b.data(), want.data(), 16, nc);
          c->gemm(m, k, a.data(), k, b.data(), got.data(), 16, nc);
          for (size_t i = 0; i < want.size(); ++i) CHECK(std::fabs(want[i] - got[i]) <= 1e-4f * (1 + std::fabs(want[i])));
        }
  }
}

TEST_CASE("f16w prompt tile computes every output bit for bit as the decode tile", "[ukernel][f16w]") {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    const F16wGemmConfig* c = f16w_gemm_config_for(isa);
    if (!c) continue;  // this CPU lacks it
    INFO(c->wide_name << " against " << c->gemm_name);
    for (size_t m = 1; m <= c->wide_mr; ++m)
      for (size_t k : {size_t{1}, size_t{2}, size_t{15}, size_t{129}, size_t{576}})
        for (size_t nc : {size_t{16}, size_t{5}, size_t{1}}) {
          const std::vector<float> a = randn(m * k, static_cast<unsigned>(m * 31 + k));
          const std::vector<uint16_t> b = halves(randn(k * kF16wNR, static_cast<unsigned>(k + 7)));
          std::vector<float> want(m * 16, -1.f), got(m * 16, -1.f);
          for (size_t r = 0; r < m; r += kF16wMR)
            c->gemm(std::min(kF16wMR, m - r), k, a.data() + r * k, k, b.data(), want.data() + r * 16, 16, nc);
          c->wide(m, k, a.data(), k, b.data(), got.data(), 16, nc);
          INFO("m " << m << " k " << k << " nc " << nc);
          CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
        }
  }
}

TEST_CASE("f16w one-row streams kernel computes every output bit for bit as the decode tile", "[ukernel][f16w]") {
  // Every variant (the AVX-512 family's two decode prefetches, one of which
  // this CPU is not given).
  int checked = 0, variants = 0;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
  for (const F16wGemmConfig* c : f16w_gemm_config_variants(isa)) {
    if (!c->gemv_streams) continue;  // the family decodes on its gemm tile
    ++variants;
    INFO(c->gemv_streams_name << " against " << c->gemm_name);
    REQUIRE(c->streams >= 1);
    REQUIRE(c->streams <= kF16wStreams);
    for (size_t streams = 1; streams <= c->streams; ++streams)
      for (size_t k : {size_t{1}, size_t{2}, size_t{15}, size_t{129}, size_t{576}}) {
        const std::vector<float> a = randn(k, static_cast<unsigned>(streams * 13 + k));
        // Each stream's panel in a buffer of its own; columns 16, 5, 1, 16.
        std::vector<std::vector<uint16_t>> panels;
        std::vector<std::vector<float>> want, got;
        const uint16_t* b[kF16wStreams];
        float* out[kF16wStreams];
        size_t nc[kF16wStreams];
        for (size_t s = 0; s < streams; ++s) {
          panels.push_back(halves(randn(k * kF16wNR, static_cast<unsigned>(k * 7 + s))));
          want.emplace_back(kF16wNR + 1, -1.f);
          got.emplace_back(kF16wNR + 1, -1.f);
        }
        for (size_t s = 0; s < streams; ++s) {
          nc[s] = s == 1 ? 5 : s == 2 ? 1 : 16;
          b[s] = panels[s].data();
          out[s] = got[s].data();
          c->gemm(1, k, a.data(), k, b[s], want[s].data(), 16, nc[s]);
        }
        c->gemv_streams(streams, k, a.data(), b, out, nc);
        for (size_t s = 0; s < streams; ++s) {
          INFO("streams " << streams << " k " << k << " stream " << s);
          CHECK(std::memcmp(want[s].data(), got[s].data(), want[s].size() * sizeof(float)) == 0);
        }
        ++checked;
      }
  }
  if (cpu_supports(Isa::Avx512)) {
    CHECK(checked > 0);
    CHECK(variants == 3);  // AVX2's and the two AVX-512 prefetches
  }
}

TEST_CASE("f16w: the decode prefetch follows the CPU generation", "[ukernel][f16w]") {
  // 1 KiB ahead on AMD before family 0x1A (Zen 4), 2 KiB elsewhere.
  if (const F16wGemmConfig* c = f16w_gemm_config_for(Isa::Avx512)) {
    const CpuFeatures& f = cpu_features();
    INFO("amd " << f.amd() << " family " << f.family << " " << c->gemv_streams_name);
    const std::string want = std::string("f32_f16w_gemv_streams_ukernel_1x16s4__avx512") +
                             (f.amd() && f.family < 0x1A ? "_l2near" : "");
    CHECK(c->gemv_streams_name == want);
  }
}

TEST_CASE("f16w: the same bits on one thread and two, decode runs and prompt tiles split over the pool",
          "[f16w]") {
  // K 256: a panel is 8 KiB, so a decode call is several runs of panels;
  // N past a whole number of panels; prompts of several row blocks.
  const int64_t k = 256, n = 1024 + 7;
  for (int64_t m : {1, 2, 13, 70}) {
    INFO("m " << m);
    SessionOptions one, two;
    one.threads = 1;
    two.threads = 2;
    Session a(build(m, k, n, false), default_op_registry(), one);
    Session b(build(m, k, n, false), default_op_registry(), two);
    REQUIRE(a.graph().nodes[0].op_type == "F16wMatMul");
    Tensor x = Tensor::allocate(DType::F32, {m, k});
    const std::vector<float> xv = randn(static_cast<size_t>(m * k), 11);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    const Tensor ya = a.run({{"x", x}})[0], yb = b.run({{"x", x}})[0];
    REQUIRE(ya.shape() == yb.shape());
    CHECK(std::memcmp(ya.raw(), yb.raw(), ya.bytes()) == 0);
    // Each row as a decode step of its own: the prompt tiles sum as the decode tile does.
    Session row(build(1, k, n, false), default_op_registry(), two);
    for (int64_t r = 0; r < m; r += 7) {
      Tensor xr = Tensor::allocate(DType::F32, {1, k});
      std::copy(xv.begin() + r * k, xv.begin() + (r + 1) * k, xr.data<float>());
      const Tensor yr = row.run({{"x", xr}})[0];
      CHECK(std::memcmp(yr.raw(), yb.data<float>() + r * n, yr.bytes()) == 0);
    }
  }
}

namespace {

// x (and a second input x2) read by float16-weight MatMuls: three on x with
// N = 45, 16, 33 (past, on and inside panel edges), one on x2; with
// `tied`, a fourth on x through a transposed table (transB, never grouped).
// float16 x when `half`, as a float16 model has it.
Graph build_siblings(int64_t m, int64_t k, bool half, bool tied) {
  const int32_t act = half ? kFloat16 : kFloat;
  const std::vector<int64_t> ns = {45, 16, 33};
  ModelBuilder b;
  b.input("x", act, {m, k}).input("x2", act, {m, k});
  for (size_t i = 0; i <= ns.size(); ++i) {
    const int64_t n = i < ns.size() ? ns[i] : 20;
    const std::string w = "w" + std::to_string(i), y = "y" + std::to_string(i);
    b.initializer<uint16_t>(w + "16", kFloat16, {k, n}, halves(randn(static_cast<size_t>(k * n), 20 + unsigned(i))));
    if (half) {
      b.node("MatMul", {i < ns.size() ? "x" : "x2", w + "16"}, {y});
    } else {
      ModelBuilder::attr_int(b.node("Cast", {w + "16"}, {w}), "to", kFloat);
      b.node("MatMul", {i < ns.size() ? "x" : "x2", w}, {y});
    }
    b.output(y, act, {m, n});
  }
  if (tied) {
    b.initializer<uint16_t>("table", kFloat16, {24, k}, halves(randn(static_cast<size_t>(24 * k), 30)));
    ModelBuilder::attr_ints(b.node("Transpose", {"table"}, {"wt"}), "perm", {1, 0});
    // A float32 x through a float16 table needs the Cast; keep it float16 there.
    if (half) {
      b.node("MatMul", {"x", "wt"}, {"y_tied"});
      b.output("y_tied", act, {m, 24});
    }
  }
  const std::string path =
      scratch_dir("f16w_sib") + "/m" + std::to_string(m) + (half ? "h" : "f") + ".onnx";
  b.save(path);
  return load_onnx(path);
}

}  // namespace

TEST_CASE("sibling grouping: F16wMatMuls on one input become one call, the same bits", "[fusion][f16w][siblings]") {
  const int64_t k = 300;
  for (bool half : {false, true})
    for (int threads : {1, 2})
      for (int64_t m : {1, 5, 70}) {
        INFO("half " << half << " threads " << threads << " m " << m);
        SessionOptions grouped_opts;
        grouped_opts.threads = threads;
        Session grouped(build_siblings(m, k, half, half), default_op_registry(), grouped_opts);
        Session plain(build_siblings(m, k, half, half), default_op_registry(), before_pass("group-sibling-matmuls", threads));
        CHECK(grouped.pass_report().get("siblings_fused") == 1);
        CHECK(grouped.pass_report().get("siblings_fused_f16w_gemms") == 3);
        CHECK(plain.pass_report().get("siblings_fused") == 0);
        // Three on x grouped; the one on x2 and the tied head stay their own.
        int f16w = 0, three = 0;
        for (const Node& n : grouped.graph().nodes) {
          f16w += n.op_type == "F16wMatMul";
          three += n.op_type == "F16wMatMul" && n.outputs.size() == 3;
        }
        CHECK(f16w == (half ? 3 : 2));
        CHECK(three == 1);
        const DType t = half ? DType::F16 : DType::F32;
        Tensor x = Tensor::allocate(t, {m, k}), x2 = Tensor::allocate(t, {m, k});
        const std::vector<float> xv = randn(static_cast<size_t>(2 * m * k), 9);
        for (int64_t i = 0; i < m * k; ++i) {
          if (half) {
            x.data<uint16_t>()[i] = float_to_half(xv[static_cast<size_t>(i)]);
            x2.data<uint16_t>()[i] = float_to_half(xv[static_cast<size_t>(m * k + i)]);
          } else {
            x.data<float>()[i] = xv[static_cast<size_t>(i)];
            x2.data<float>()[i] = xv[static_cast<size_t>(m * k + i)];
          }
        }
        const std::vector<Tensor> a = grouped.run({{"x", x}, {"x2", x2}}), b = plain.run({{"x", x}, {"x2", x2}});
        REQUIRE(a.size() == b.size());
        for (size_t o = 0; o < a.size(); ++o) {
          INFO("output " << o);
          REQUIRE(a[o].shape() == b[o].shape());
          CHECK(std::memcmp(a[o].raw(), b[o].raw(), a[o].bytes()) == 0);
        }
      }
}

TEST_CASE("sibling grouping must not fire on a lone GEMM or a transposed table", "[fusion][f16w][siblings][must-not-fire]") {
  // One F16wMatMul per input, and (float16) a transB head beside a plain one on the same x.
  ModelBuilder b;
  b.input("x", kFloat16, {1, 32}).output("y", kFloat16, {1, 16}).output("z", kFloat16, {1, 8});
  b.initializer<uint16_t>("w", kFloat16, {32, 16}, halves(randn(32 * 16, 1)));
  b.initializer<uint16_t>("table", kFloat16, {8, 32}, halves(randn(8 * 32, 2)));
  b.node("MatMul", {"x", "w"}, {"y"});
  ModelBuilder::attr_ints(b.node("Transpose", {"table"}, {"wt"}), "perm", {1, 0});
  b.node("MatMul", {"x", "wt"}, {"z"});
  const std::string path = scratch_dir("f16w_sib_no") + "/model.onnx";
  b.save(path);
  Session s(load_onnx(path), default_op_registry());
  CHECK(s.pass_report().get("f16w_fused") == 2);
  CHECK(s.pass_report().get("siblings_fused") == 0);
  CHECK(s.graph().nodes.size() == 2);
}
