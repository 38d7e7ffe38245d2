// Row invariance: every GEMM family computes a row of its output the same
// way whatever the number of rows in the call, bit for bit. Exact lookup
// decoding rests on it (models/lookup.h): a batched pass that verifies
// drafted tokens must give each position the logits, and the KV cache the
// keys and values, that one-token decode steps would have.
//
// Each case runs M rows in one call and then each row alone (M = 1: the gemv
// and decode paths), one thread and two, on every ISA this CPU runs.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "tests/random_util.h"
#include "base/dtype.h"
#include "base/thread_pool.h"
#include "ops/sgemm.h"
#include "quant/q4_gemm.h"
#include "quant/ukernels/f16w_ukernels.h"
#include "quant/ukernels/f32_ukernels.h"
#include "quant/ukernels/kernel_config.h"
#include "tests/isa_test_util.h"
#include "tests/quant_test_util.h"

using namespace onebit;

using onebit::test::randn;

namespace {

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// sgemm (unpacked B, packed B, transposed B): m rows together, then each alone.
void sgemm_rows(Isa isa) {
  const SgemmConfig* cfg = sgemm_config_for(isa);
  REQUIRE(cfg);
  ThreadPool pool(2);
  const size_t n = 2 * cfg->nr + 5, k = cfg->kc + 37;
  const std::vector<float> b = randn(k * n, 1), bias = randn(n, 2);
  const PackedB packed(*cfg, k, n, b.data(), n, false, nullptr);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
    for (size_t m : {size_t{2}, size_t{3}, size_t{5}, cfg->mr + 1, size_t{40}, size_t{70}})
      for (bool trans_b : {false, true})
        for (int mode : {0, 1, 2}) {  // B an activation, packed, a weight read in place (sgemm_weight)
          const bool use_packed = mode == 1, use_weight = mode == 2;
          if (trans_b && mode != 0) continue;
          const std::vector<float> a = randn(m * k, static_cast<unsigned>(m));
          auto run = [&](size_t rows, const float* x, float* y) {
            const size_t ws = use_packed   ? sgemm_packed_workspace(packed, rows, false)
                              : use_weight ? sgemm_weight_workspace(*cfg, rows, n, k, 2)
                                           : sgemm_workspace(*cfg, rows, n, k, false, trans_b);
            auto work = quant_test::workspace(ws);
            if (use_packed) sgemm_packed(rows, x, k, false, packed, bias.data(), y, n, work.get(), p);
            else if (use_weight) sgemm_weight(*cfg, rows, n, k, x, k, b.data(), n, bias.data(), y, n, work.get(), 2, p);
            // B^T is B read as [n][k]: any data will do for invariance.
            else sgemm(*cfg, rows, n, k, x, k, false, b.data(), trans_b ? k : n, trans_b, bias.data(), y, n, work.get(), p);
          };
          std::vector<float> all(m * n), one(n);
          run(m, a.data(), all.data());
          for (size_t r = 0; r < m; ++r) {
            run(1, a.data() + r * k, one.data());
            INFO("m " << m << " row " << r << (trans_b ? " B^T" : "") << (use_packed ? " packed" : "")
                      << (use_weight ? " in place" : "") << (p ? " 2 threads" : " 1 thread"));
            CHECK(same_bits(all.data() + r * n, one.data(), n));
          }
        }
}

void f16w_rows(Isa isa) {
  const F16wGemmConfig* cfg = f16w_gemm_config_for(isa);
  if (!cfg) {
    WARN("no float16-weight kernels for " << isa_name(isa));
    return;
  }
  for (size_t k : {size_t{1}, size_t{2}, size_t{15}, size_t{130}}) {
    std::vector<uint16_t> b(k * kF16wNR);
    const std::vector<float> bf = randn(k * kF16wNR, static_cast<unsigned>(k));
    for (size_t i = 0; i < b.size(); ++i) b[i] = float_to_half(bf[i]);
    // The decode tile's rows together, and the prompt tile's (F16wMatMul
    // runs it past kF16wMR rows), against each row alone on the decode tile.
    for (size_t m = 2; m <= cfg->wide_mr; ++m)
      for (size_t nc : {kF16wNR, size_t{5}}) {
        const std::vector<float> a = randn(m * k, static_cast<unsigned>(m * 7 + k));
        std::vector<float> all(m * kF16wNR, -1.0f), one(kF16wNR, -1.0f);
        (m <= kF16wMR ? cfg->gemm : cfg->wide)(m, k, a.data(), k, b.data(), all.data(), kF16wNR, nc);
        for (size_t r = 0; r < m; ++r) {
          cfg->gemm(1, k, a.data() + r * k, k, b.data(), one.data(), kF16wNR, nc);
          INFO("k " << k << " m " << m << " row " << r << " nc " << nc);
          CHECK(same_bits(all.data() + r * kF16wNR, one.data(), nc));
        }
      }
  }
}

void q4_rows(Isa isa) {
  const Q4GemmConfig* cfg = q4_gemm_config_for(isa);
  REQUIRE(cfg);
  ThreadPool pool(2);
  const size_t k = 96, n = 70, bs = 32;
  std::mt19937 rng(3);
  std::vector<uint8_t> codes((k * n + 1) / 2);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
  const std::vector<float> scales = randn(k / bs * n, 4);
  Q4OnnxWeight w;
  w.k = k;
  w.n = n;
  w.data = codes.data();
  w.block_size = bs;
  w.scales = scales.data();
  for (Q4Act act : {Q4Act::kInt8Row, Q4Act::kInt8Block, Q4Act::kFloat}) {
    Q4GemmOptions opt;
    opt.act = act;
    const Q4Gemm gemm(*cfg, w, opt, nullptr);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
      for (size_t m : {size_t{2}, size_t{5}, size_t{9}, size_t{33}}) {
        const std::vector<float> a = randn(m * k, static_cast<unsigned>(m + 10));
        std::vector<float> all(m * n), one(n);
        auto work = quant_test::workspace(gemm.workspace_bytes(m));
        gemm.run(m, a.data(), k, all.data(), n, work.get(), p);
        for (size_t r = 0; r < m; ++r) {
          gemm.run(1, a.data() + r * k, k, one.data(), n, work.get(), p);
          INFO("act " << static_cast<int>(act) << " m " << m << " row " << r);
          CHECK(same_bits(all.data() + r * n, one.data(), n));
        }
      }
  }
}

}  // namespace

#define ROW_CASES(name, body)                              \
  ONEBIT_ISA_CASE(name, "[row-invariance]", Scalar, body)  \
  ONEBIT_ISA_CASE(name, "[row-invariance]", Avx2, body)    \
  ONEBIT_ISA_CASE(name, "[row-invariance]", Avx512, body)

ROW_CASES("sgemm rows do not depend on the row count", sgemm_rows)
ROW_CASES("float16-weight rows do not depend on the row count", f16w_rows)
ROW_CASES("q4 rows do not depend on the row count", q4_rows)
ONEBIT_ISA_CASE("q4 rows do not depend on the row count", "[row-invariance]", Avx512Vnni, q4_rows)
