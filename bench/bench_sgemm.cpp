// Float MatMul kernels on the Qwen3-0.6B projection shapes, and the memory
// read bandwidth they are bound by at M = 1.
//
//   ninja -C build-mm bench_sgemm
//   build-mm/bench/bench_sgemm --benchmark_filter=sgemm
//   ONEBIT_ISA=avx2 build-mm/bench/bench_sgemm      # another kernel family
//
// sgemm/K/N/M/threads reports GFLOP/s and, per second, the bytes of packed
// weight read (GB/s, meaningful at M = 1 where the weight is read once per
// call); read_bandwidth/MiB/threads streams a buffer of that size with wide
// loads, the roofline the M = 1 rows are measured against;
// decode_step/model/packed/threads reads a whole model's projections once
// per iteration (larger than any cache), in place or packed.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <sys/mman.h>

#include "bench/bench_main.h"
#include "base/cpu_features.h"
#include "ops/sgemm.h"
#include "base/thread_pool.h"

namespace {

using namespace onebit;

struct Free {
  void operator()(void* p) const { std::free(p); }
};

float* alloc_floats(size_t n, std::unique_ptr<void, Free>& owner) {
  owner.reset(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64));
  return static_cast<float*>(owner.get());
}

void fill_random(float* p, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) p[i] = dist(rng);
}

// state.range: K, N, M, threads.
void BM_sgemm(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0)), n = static_cast<size_t>(state.range(1));
  const size_t m = static_cast<size_t>(state.range(2));
  ThreadPool pool(static_cast<int>(state.range(3)));
  const SgemmConfig& cfg = sgemm_config();

  std::unique_ptr<void, Free> a_mem, b_mem, c_mem, ws_mem;
  float* a = alloc_floats(m * k, a_mem);
  float* b = alloc_floats(k * n, b_mem);
  float* c = alloc_floats(m * n, c_mem);
  fill_random(a, m * k, 1);
  fill_random(b, k * n, 2);
  const PackedB packed(cfg, k, n, b, n, false, &pool);
  b_mem.reset();  // only the packed copy is read
  const size_t ws_bytes = sgemm_packed_workspace(packed, m, false);
  void* ws = ws_bytes ? alloc_floats(ws_bytes / sizeof(float), ws_mem) : nullptr;
  std::memset(c, 0, m * n * sizeof(float));

  for (auto _ : state) {
    sgemm_packed(m, a, k, false, packed, nullptr, c, n, ws, &pool);
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * double(m) * double(n) * double(k);
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(double(packed.bytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(m == 1 ? cfg.gemv_name : cfg.gemm_name);
}

// Sum of a buffer, four 64-byte loads in flight per iteration.
__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

float sum_avx2(const float* p, size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

// state.range: MiB, threads. Each thread reads one contiguous part, as the
// M = 1 path splits the weight panels.
void BM_read_bandwidth(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) << 18;  // floats in MiB
  ThreadPool pool(static_cast<int>(state.range(1)));
  std::unique_ptr<void, Free> mem;
  float* p = alloc_floats(n, mem);
  fill_random(p, n, 3);
  const bool wide = cpu_features().avx512f;
  const int64_t blocks = static_cast<int64_t>(n / 64);
  for (auto _ : state) {
    pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      const float* q = p + b0 * 64;
      const size_t len = static_cast<size_t>(b1 - b0) * 64;
      float s = wide ? sum_avx512(q, len) : sum_avx2(q, len);
      benchmark::DoNotOptimize(s);
    });
  }
  state.counters["GB/s"] = benchmark::Counter(double(n) * sizeof(float) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// (K, N) of the Qwen3-0.6B projections: q/o, k/v (GQA 8×128), MLP gate/up
// and down, and the tied LM head.
const int64_t kShapes[][2] = {{1024, 2048}, {1024, 1024}, {2048, 1024}, {1024, 3072}, {3072, 1024}, {1024, 151936}};

void sgemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"K", "N", "M", "threads"});
  for (int64_t m : {1, 128})
    for (const auto& s : kShapes)
      for (int64_t t : {1, 2}) b->Args({s[0], s[1], m, t});
}

void bandwidth_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"MiB", "threads"});
  // The weight sizes above (4 to 12 MiB, L3-resident on this machine, and
  // 594 MiB) and a 1 GiB buffer that no cache holds.
  for (int64_t mib : {4, 8, 12, 594, 1024})
    for (int64_t t : {1, 2}) b->Args({mib, t});
}

// One decode step's float32 projections of a whole model, M = 1, each weight
// read once per step as a model file's mapping holds it: [K,N] row-major on
// 4 KiB pages (MADV_NOHUGEPAGE, as the page cache maps a file) through
// sgemm_weight, or packed once (PackedB) as --pack-weights does. The set is
// larger than any cache here, so the rate is DRAM's.
// state.range: model (0: SmolLM2-135M, 30 layers of K 576; 1: Qwen3-0.6B's
// shapes, 8 layers of K 1024: q, k, v, o, gate and up as one, down), mode (0 in place, 1 packed), threads.
void BM_decode_step(benchmark::State& state) {
  static const std::vector<std::pair<size_t, size_t>> kSmol = {{576, 576}, {576, 192}, {576, 192}, {576, 576},
                                                                {576, 3072}, {1536, 576}};
  static const std::vector<std::pair<size_t, size_t>> kQwen = {{1024, 2048}, {1024, 1024}, {1024, 1024},
                                                                {2048, 1024}, {1024, 6144}, {3072, 1024}};
  const bool smol = state.range(0) == 0, packed_mode = state.range(1) == 1;
  const auto& layer = smol ? kSmol : kQwen;
  const size_t layers = smol ? 30 : 8;
  ThreadPool pool(static_cast<int>(state.range(2)));
  const SgemmConfig& cfg = sgemm_config();
  std::vector<std::pair<size_t, size_t>> shapes;
  for (size_t l = 0; l < layers; ++l) shapes.insert(shapes.end(), layer.begin(), layer.end());
  size_t floats = 0, max_k = 0, max_n = 0;
  for (auto [k, n] : shapes) floats += k * n, max_k = std::max(max_k, k), max_n = std::max(max_n, n);
  const size_t bytes = floats * sizeof(float);
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return state.SkipWithError("mmap failed");
  const auto unmap = [bytes](void* p) { munmap(p, bytes); };
  const std::unique_ptr<void, decltype(unmap)> mapping(map, unmap);
  if (madvise(map, bytes, MADV_NOHUGEPAGE) != 0) return state.SkipWithError("madvise(MADV_NOHUGEPAGE) failed");
  auto* w = static_cast<float*>(map);
  fill_random(w, floats, 4);
  std::vector<PackedB> packs;
  if (packed_mode) {
    size_t off = 0;
    for (auto [k, n] : shapes) packs.emplace_back(cfg, k, n, w + off, n, false, &pool), off += k * n;
  }
  std::unique_ptr<void, Free> a_mem, c_mem;
  float* a = alloc_floats(max_k, a_mem);
  float* c = alloc_floats(max_n, c_mem);
  fill_random(a, max_k, 5);
  for (auto _ : state) {
    size_t off = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [k, n] = shapes[i];
      if (packed_mode) sgemm_packed(1, a, k, false, packs[i], nullptr, c, n, nullptr, &pool);
      else sgemm_weight(cfg, 1, n, k, a, k, w + off, n, nullptr, c, n, nullptr, pool.size(), &pool);
      off += k * n;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(packed_mode ? cfg.gemv_name : cfg.axpy_name);
}

}  // namespace

BENCHMARK(BM_read_bandwidth)->Apply(bandwidth_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decode_step)
    ->ArgNames({"model", "packed", "threads"})
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_sgemm)->Apply(sgemm_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

ONEBIT_BENCHMARK_MAIN()
