// Attention's two decode products over a KV cache (ops/kv_gemm.h), float32
// and float16, on the Qwen3-0.6B geometry: 28 layers × 8 KV heads of 128,
// 2 query rows per KV head. Each iteration visits every head once, so the
// cache streams from memory as in a decode step (224 heads × T positions ×
// 128 × 2 or 4 bytes: far past the last-level cache at T ≥ 256).
//
//   ninja -C build bench_attention && build/bench/bench_attention
//
// BM_kv/T/TYPE/MIX/D/ROWS (TYPE 0 float32, 1 float16, 2 int8 + scales; D
// the head size and ROWS the query heads per KV head: 128/2 is Qwen3-0.6B,
// 64/3 SmolLM2, 64/4 Llama 3.2 1B, each over 224 heads) reports the
// cache bytes read per second (keys for scores, values for mix); BM_sgemm/T/MIX the float32 cache on the float
// GEMM (its dot kernel for Q·Kᵀ, its tile kernel in place for P·V), the
// path before the KV kernels; BM_read a plain read of as many bytes, the
// limit all three are measured against in the same run. BM_kv_layers/T/TYPE/
// MIX/HUGE/D/ROWS the same products with every layer's streams starting
// cold (a layer: 8 KV heads of 128, or 3 of 64), on 4 KiB or huge pages.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "bench/bench_main.h"
#include "base/dtype.h"
#include "base/memory_budget.h"
#include "ops/kv_gemm.h"
#include "ops/sgemm.h"

namespace {

using namespace onebit;

constexpr size_t kHeads = 28 * 8, kDim = 128, kRows = 2;

// state.range: T, cache type (0 float32, 1 float16, 2 int8 codes with a
// float32 scale per position, as --kv-dtype q8 keeps them), product (0
// scores, 1 mix), head size, query rows per KV head.
void BM_kv(benchmark::State& state) {
  const size_t t = static_cast<size_t>(state.range(0));
  const size_t dim = static_cast<size_t>(state.range(3)), qrows = static_cast<size_t>(state.range(4));
  const int type = static_cast<int>(state.range(1));
  const bool mix = state.range(2) != 0;
  const DType dtype = type == 0 ? DType::F32 : type == 1 ? DType::F16 : DType::I8;
  // A head: its rows, then (int8) its t scales.
  const size_t head_bytes = type == 2 ? t * (dim + 4) : t * dim * (type == 1 ? 2 : 4);
  std::vector<unsigned char> cache(kHeads * head_bytes);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t h = 0; h < kHeads; ++h) {
    unsigned char* head = cache.data() + h * head_bytes;
    for (size_t i = 0; i < t * dim; ++i) {
      const float x = u(rng);
      if (type == 0) reinterpret_cast<float*>(head)[i] = x;
      else if (type == 1) reinterpret_cast<uint16_t*>(head)[i] = float_to_half(x);
      else reinterpret_cast<int8_t*>(head)[i] = static_cast<int8_t>(std::lround(x * 127));
    }
    if (type == 2)
      for (size_t j = 0; j < t; ++j) reinterpret_cast<float*>(head + t * dim)[j] = 0.01f * u(rng);
  }
  std::vector<float> a(qrows * std::max(t, dim)), y(qrows * std::max(t, dim));
  for (float& x : a) x = u(rng);
  const KvGemmConfig cfg = kv_gemm_config();
  std::vector<unsigned char> ws(kv_mix_workspace(cfg, qrows, t, dim, dtype) + 64);
  void* work = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
  for (auto _ : state) {
    for (size_t h = 0; h < kHeads; ++h) {
      const unsigned char* head = cache.data() + h * head_bytes;
      const KvRows rows{head, dtype, type == 2 ? reinterpret_cast<const float*>(head + t * dim) : nullptr};
      if (mix) kv_mix(cfg, qrows, t, dim, a.data(), t, rows, y.data(), dim, work, nullptr);
      else kv_scores(cfg, qrows, t, dim, a.data(), dim, rows, y.data(), t, nullptr);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kHeads * head_bytes));
  state.SetLabel(fmt::format("{} {}, heads of {}, {} rows", mix ? "P.V" : "Q.K^T", dtype_name(dtype), dim, qrows));
}

// BM_kv as a decode step meets it: each layer's eight heads (one GqaMatMul
// node) after the layer's weights went by (a 16 MB read between layers, not
// timed), so every head's stream starts cold, as in the model. state.range
// as BM_kv, then the pages (below).
void BM_kv_layers(benchmark::State& state) {
  const size_t t = static_cast<size_t>(state.range(0));
  const int type = static_cast<int>(state.range(1));
  const bool mix = state.range(2) != 0;
  // state.range(4) and (5): the head size and query rows per KV head, as
  // BM_kv; a layer is 8 KV heads of 128 (Qwen3-0.6B) or 3 of 64 (SmolLM2).
  const size_t dim = static_cast<size_t>(state.range(4)), qrows = static_cast<size_t>(state.range(5));
  const size_t layer_heads = dim == kDim ? 8 : 3;
  const DType dtype = type == 0 ? DType::F32 : type == 1 ? DType::F16 : DType::I8;
  const size_t head_bytes = type == 2 ? t * (dim + 4) : t * dim * (type == 1 ? 2 : 4);
  // state.range(3): the cache on 4 KiB pages (0) or as the KV store keeps
  // it, on huge pages (1: budgeted_huge_pages).
  const size_t cache_bytes = (kHeads * head_bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const bool huge = state.range(3) != 0;
  void* mem = huge ? budgeted_huge_pages(cache_bytes, "bench") : budgeted_alloc(cache_bytes, 4096, "bench");
  std::memset(mem, 1, cache_bytes);
  std::span<unsigned char> cache(static_cast<unsigned char*>(mem), cache_bytes);
  for (size_t h = 0; h < kHeads && type == 2; ++h)
    for (size_t j = 0; j < t; ++j) reinterpret_cast<float*>(cache.data() + h * head_bytes + t * dim)[j] = 0.01f;
  std::vector<float> weights(size_t{4} << 20, 1.0f);
  std::vector<float> a(qrows * std::max(t, dim), 0.5f), y(qrows * std::max(t, dim));
  const KvGemmConfig cfg = kv_gemm_config();
  std::vector<unsigned char> ws(kv_mix_workspace(cfg, qrows, t, dim, dtype) + 64);
  void* work = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
  for (auto _ : state) {
    double seconds = 0;
    for (size_t h0 = 0; h0 + layer_heads <= kHeads; h0 += layer_heads) {
      __m256 sum = _mm256_setzero_ps();
      for (size_t i = 0; i < weights.size(); i += 16) sum = _mm256_add_ps(sum, _mm256_loadu_ps(&weights[i]));
      benchmark::DoNotOptimize(sum);
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t h = h0; h < h0 + layer_heads; ++h) {
        const unsigned char* head = cache.data() + h * head_bytes;
        const KvRows rows{head, dtype, type == 2 ? reinterpret_cast<const float*>(head + t * dim) : nullptr};
        if (mix) kv_mix(cfg, qrows, t, dim, a.data(), t, rows, y.data(), dim, work, nullptr);
        else kv_scores(cfg, qrows, t, dim, a.data(), dim, rows, y.data(), t, nullptr);
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(seconds);
  }
  if (huge) budgeted_pages_free(mem, cache_bytes);
  else budgeted_free(mem, cache_bytes, 4096);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * (kHeads / layer_heads * layer_heads) * head_bytes));
  state.SetLabel(fmt::format("{} {}, cold streams, {} pages, heads of {}, {} rows", mix ? "P.V" : "Q.K^T",
                             dtype_name(dtype), huge ? "huge" : "4 KiB", dim, qrows));
}

// The same bytes read by a plain sum (one stream, as a head's kernel reads
// it): what the kernels above are measured against, in the same run.
void BM_read(benchmark::State& state) {
  const size_t bytes = kHeads * static_cast<size_t>(state.range(0)) * kDim * 4;
  std::vector<float> buf(bytes / 4, 1.0f);
  for (auto _ : state) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < buf.size(); i += 32) {
      s0 = _mm256_add_ps(s0, _mm256_loadu_ps(&buf[i]));
      s1 = _mm256_add_ps(s1, _mm256_loadu_ps(&buf[i + 8]));
      s2 = _mm256_add_ps(s2, _mm256_loadu_ps(&buf[i + 16]));
      s3 = _mm256_add_ps(s3, _mm256_loadu_ps(&buf[i + 24]));
    }
    benchmark::DoNotOptimize(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// The float32 cache on the float GEMM. state.range: T, product (0 scores, 1 mix).
void BM_sgemm(benchmark::State& state) {
  const size_t t = static_cast<size_t>(state.range(0));
  const bool mix = state.range(1) != 0;
  std::vector<float> cache(kHeads * t * kDim, 0.5f), a(kRows * std::max(t, kDim), 0.1f), y(kRows * std::max(t, kDim));
  const SgemmConfig& cfg = sgemm_config();
  std::vector<float> ws(sgemm_workspace(cfg, kRows, mix ? kDim : t, mix ? t : kDim, false, !mix) / 4 + 16);
  float* work = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
  for (auto _ : state) {
    for (size_t h = 0; h < kHeads; ++h) {
      const float* kv = cache.data() + h * t * kDim;
      if (mix) sgemm(cfg, kRows, kDim, t, a.data(), t, false, kv, kDim, false, nullptr, y.data(), kDim, work, nullptr);
      else sgemm(cfg, kRows, t, kDim, a.data(), kDim, false, kv, kDim, true, nullptr, y.data(), t, work, nullptr);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kHeads * t * kDim * 4));
  state.SetLabel(mix ? "P.V float32, float GEMM" : "Q.K^T float32, float GEMM");
}

BENCHMARK(BM_read)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sgemm)->ArgsProduct({{256, 1024, 4096}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kv)->ArgsProduct({{256, 1024, 4096}, {0, 1, 2}, {0, 1}, {128}, {2}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kv)->ArgsProduct({{256, 1024}, {0, 1, 2}, {0, 1}, {64}, {3, 4}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kv_layers)
    ->ArgsProduct({{256, 1024}, {0, 1, 2}, {0, 1}, {0, 1}, {128}, {2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kv_layers)
    ->ArgsProduct({{256, 1024}, {0, 1, 2}, {0, 1}, {1}, {64}, {3}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

ONEBIT_BENCHMARK_MAIN()
