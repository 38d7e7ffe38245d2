// The float GEMM driver (ops/sgemm.h) on every f32 microkernel family
// (quant/ukernels/f32_gemm__*.cpp), one ISA per test case, against the
// double-precision SgemmTester (tests/sgemm_tester.h).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "ops/sgemm.h"
#include "quant/ukernels/f32_ukernels.h"
#include "quant/ukernels/kernel_config.h"
#include "tests/isa_test_util.h"
#include "tests/sgemm_tester.h"

using namespace onebit;
using test::SgemmTester;
using test::Workspace;
using test::make_workspace;

namespace {

const SgemmConfig& config_of(Isa isa) {
  const SgemmConfig* c = sgemm_config_for(isa);
  REQUIRE(c);  // isa_or_skip said this CPU runs it
  REQUIRE(c->isa == isa);
  return *c;
}

// The tile-edge sweep for one family: M, N and K below, at and above the
// tile and the K block, packed and in-place B, with and without bias.
void tile_edges(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  const size_t mr = cfg.mr, nr = cfg.nr, kc = cfg.kc;
  for (size_t m : {size_t{1}, size_t{2}, mr - 1, mr, mr + 1, size_t{37}, size_t{200}})
    for (size_t n : {size_t{1}, nr - 1, nr, nr + 1, 2 * nr + 3, 5 * nr - 1})
      for (size_t k : {size_t{1}, size_t{3}, size_t{16}, kc - 1, kc, kc + 1, size_t{1000}}) {
        if (m * n * k > 8'000'000) continue;  // keeps the sweep to seconds; big shapes are covered below
        for (bool packed : {true, false})
          SgemmTester().config(cfg).m(m).n(n).k(k).bias((m + n + k) % 2 == 0).packed(packed).test();
      }
}

void two_threads(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  ThreadPool pool(2);
  // Large enough to cross the parallel thresholds in every path.
  for (size_t m : {size_t{1}, size_t{3}, size_t{37}, size_t{300}})
    for (bool packed : {true, false}) {
      SgemmTester().config(cfg).pool(&pool).m(m).n(517).k(cfg.kc + 7).bias(true).packed(packed).test();
      SgemmTester().config(cfg).pool(&pool).m(m).n(65).k(1000).packed(packed).test();
    }
  SgemmTester().config(cfg).pool(&pool).m(1).n(3000).k(700).bias(true).test();
}

void strided_and_transposed(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
    for (size_t m : {size_t{1}, cfg.mr + 1, size_t{37}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool packed : {true, false})
            SgemmTester()
                .config(cfg)
                .pool(p)
                .m(m)
                .n(cfg.nr * 2 + 5)
                .k(cfg.kc + 3)
                .lda(cfg.kc + 40)
                .ldb(cfg.kc + 77)
                .ldc(cfg.nr * 3 + 1)
                .trans_a(ta)
                .trans_b(tb)
                .bias(true)
                .packed(packed)
                .test();
}

// A against a transposed B: the dot path (attention's Q·Kᵀ), every row count.
void dot_path(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  ThreadPool pool(2);
  CHECK(std::string(cfg.dot_name).find(isa_name(cfg.isa)) != std::string::npos);
  // Rows up to the dot kernel's limit, past it and several calls' worth;
  // K below, at and above a vector and a KV head's width.
  for (size_t m : {size_t{1}, size_t{2}, size_t{3}, kF32DotMaxRows, kF32DotMaxRows + 1, size_t{3} * kF32DotMaxRows + 2})
    for (size_t n : {size_t{1}, size_t{7}, size_t{33}, size_t{1000}})
      for (size_t k : {size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size_t{128}, size_t{131}})
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
          SgemmTester().config(cfg).pool(p).m(m).n(n).k(k).lda(k + 3).ldb(k + 5).trans_b(true).bias(n % 2 == 1)
              .packed(false).test();
  CHECK(sgemm_workspace(cfg, kF32DotMaxRows, 100, 128, false, true) == 0);
  CHECK(sgemm_workspace(cfg, 300, 100, 128, false, true) == 0);
}

void empty_dimensions(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  SgemmTester().config(cfg).m(3).n(5).k(0).bias(true).test();
  SgemmTester().config(cfg).m(3).n(5).k(0).bias(false).packed(false).test();
  SgemmTester().config(cfg).m(0).n(5).k(4).test();
  SgemmTester().config(cfg).m(3).n(0).k(4).packed(false).test();
}

// A constant B read in place (sgemm_weight): every output bit for bit what
// the packed path computes, for every row count (one row: the axpy kernel
// over column chunks; more: blocks packed per task), with B rows wider than
// N, one and two threads, and fewer block buffers than threads.
void weight_in_place(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  ThreadPool pool(2);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t m : {size_t{1}, size_t{2}, cfg.mr + 1, size_t{37}, size_t{300}})
    for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, cfg.nr * 3 + 5, size_t{2100}, size_t{4200}})
      // k: every row count of an axpy call (1 to kF32AxpyRows, and past it).
      for (size_t k : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{6}, size_t{7}, size_t{8}, size_t{9},
                       size_t{130}, cfg.kc + 37}) {
        if (m * n * k > 20'000'000) continue;
        for (size_t extra : {size_t{0}, size_t{9}}) {
          const size_t ldb = n + extra;
          std::vector<float> a(m * k), b(k * ldb), bias(n);
          for (float& v : a) v = dist(rng);
          for (float& v : b) v = dist(rng);
          for (float& v : bias) v = dist(rng);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
            for (size_t buffers : {size_t{1}, size_t{2}})
              for (bool with_bias : {false, true}) {
                INFO(cfg.axpy_name << " m=" << m << " n=" << n << " k=" << k << " ldb=" << ldb << " threads="
                                   << (p ? 2 : 1) << " buffers=" << buffers << " bias=" << with_bias);
                const float* bp = with_bias ? bias.data() : nullptr;
                const PackedB packed(cfg, k, n, b.data(), ldb, false, p);
                std::vector<float> want(m * n), got(m * n, -1.0f);
                Workspace w1 = make_workspace(sgemm_packed_workspace(packed, m, false));
                sgemm_packed(m, a.data(), k, false, packed, bp, want.data(), n, w1.get(), p);
                Workspace w2 = make_workspace(sgemm_weight_workspace(cfg, m, n, k, buffers));
                sgemm_weight(cfg, m, n, k, a.data(), k, b.data(), ldb, bp, got.data(), n, w2.get(), buffers, p);
                CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
              }
        }
      }
  CHECK(sgemm_weight_workspace(cfg, 1, 3000, 1024, 2) == 0);  // decode needs none
}

void names(Isa isa) {
  const SgemmConfig& c = config_of(isa);
  CHECK(c.gemm);
  CHECK(c.gemv);
  CHECK(c.dot);
  CHECK(c.mr * c.nr > 0);
  CHECK(std::string(c.gemm_name).find(isa_name(c.isa)) != std::string::npos);
  CHECK(std::string(c.gemv_name).find(isa_name(c.isa)) != std::string::npos);
  CHECK(c.axpy);
  CHECK(std::string(c.axpy_name).find(isa_name(c.isa)) != std::string::npos);
}

}  // namespace

// Row blocks over prefixes of B's rows (sgemm_row_blocks: a prompt's P·V
// stopping at each block's last nonzero P) against sgemm of each block on
// its own prefix, bit for bit: blocks of 1 row, a few, a tile, many; a
// prefix of 0, 1, a part, all of k.
void row_blocks(Isa isa) {
  const SgemmConfig& cfg = config_of(isa);
  ThreadPool pool(2);
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
    const size_t m = 1 + 5 + cfg.mr + 90 + 40, n = 2 * cfg.nr + 5, k = cfg.kc + 37;
    const std::vector<size_t> starts = {0, 1, 6, 6 + cfg.mr, 6 + cfg.mr + 90};
    const std::vector<size_t> ks = {k, 1, 0, 17, k / 2};
    std::mt19937 rng(5);
    std::normal_distribution<float> dist;
    std::vector<float> a(m * k), b(k * n), got(m * n, -1.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    Workspace ws = make_workspace(sgemm_workspace(cfg, m, n, k, false, false));
    sgemm_row_blocks(cfg, m, n, k, a.data(), k, b.data(), n, starts.data(), ks.data(), starts.size(), got.data(), n,
                     ws.get(), tp);
    for (size_t i = 0; i < starts.size(); ++i) {
      const size_t r0 = starts[i], r1 = i + 1 < starts.size() ? starts[i + 1] : m;
      INFO("rows " << r0 << ".." << r1 << " over " << ks[i] << " of " << k << (tp ? ", 2 threads" : ""));
      std::vector<float> want((r1 - r0) * n);
      Workspace w1 = make_workspace(sgemm_workspace(cfg, r1 - r0, n, ks[i], false, false));
      sgemm(cfg, r1 - r0, n, ks[i], a.data() + r0 * k, k, false, b.data(), n, false, nullptr, want.data(), n, w1.get(),
            tp);
      CHECK(std::memcmp(want.data(), got.data() + r0 * n, want.size() * sizeof(float)) == 0);
    }
  }
}

// The f32 families: scalar (the reference), avx2, avx512 (VNNI adds nothing
// to float).
#define SGEMM_CASES(name, body)                   \
  ONEBIT_ISA_CASE(name, "[sgemm]", Scalar, body)  \
  ONEBIT_ISA_CASE(name, "[sgemm]", Avx2, body)    \
  ONEBIT_ISA_CASE(name, "[sgemm]", Avx512, body)

SGEMM_CASES("sgemm names its kernels", names)
SGEMM_CASES("sgemm tile edges", tile_edges)
SGEMM_CASES("sgemm two threads", two_threads)
SGEMM_CASES("sgemm strided and transposed operands", strided_and_transposed)
SGEMM_CASES("sgemm a few rows against a transposed B (the dot path)", dot_path)
SGEMM_CASES("sgemm empty dimensions", empty_dimensions)
SGEMM_CASES("sgemm row blocks over prefixes of B equal sgemm of each block bit for bit", row_blocks)
SGEMM_CASES("sgemm a weight read in place equals the packed weight bit for bit", weight_in_place)

TEST_CASE("sgemm: the chosen family is the best this CPU runs", "[sgemm]") {
  const SgemmConfig& best = sgemm_config();
  CHECK(cpu_supports(best.isa));
  CHECK(best.isa <= isa_limit());
  for (Isa isa : kIsas)
    if (cpu_supports(isa) && isa <= isa_limit() && isa < Isa::Avx512Vnni) CHECK(best.isa >= isa);
  CHECK(sgemm_config_for(Isa::Scalar) != nullptr);
}

TEST_CASE("isa: a cap given by name as ONEBIT_ISA gives it, and a name that is no level refused", "[isa]") {
  // The one function the CLI, the tests' main and the benchmarks' main apply.
  const Isa before = isa_limit();
  CHECK(set_isa_limit_named("").empty());
  CHECK(isa_limit() == before);
  CHECK(set_isa_limit_named("avx9") == "ONEBIT_ISA=avx9 is not a kernel family; valid: " + isa_names());
  CHECK(isa_limit() == before);
  CHECK(isa_names() == "scalar, avx2, avx512, avx512vnni, amx");
  CHECK(set_isa_limit_named("scalar").empty());
  CHECK(isa_limit() == Isa::Scalar);
  CHECK(set_isa_limit_named(isa_name(before)).empty());
  CHECK(isa_limit() == before);
}

TEST_CASE("sgemm: Qwen3 projection shapes", "[sgemm]") {
  ThreadPool pool(2);
  const SgemmConfig& cfg = sgemm_config();
  SgemmTester().config(cfg).pool(&pool).m(1).n(2048).k(1024).test();
  SgemmTester().config(cfg).pool(&pool).m(16).n(1024).k(3072).test();
  SgemmTester().config(cfg).pool(&pool).m(128).n(1024).k(1024).bias(true).test();
}
