// Integer GEMM kernels (quant/) on the Qwen3-0.6B projection shapes, and the
// read bandwidth the decode rows are bound by.
//
//   ninja -C build-quant bench_quant
//   build-quant/bench/bench_quant                                # everything
//   build-quant/bench/bench_quant --benchmark_filter='q4/|stream' # Q4 decode vs bandwidth
//   ONEBIT_ISA=avx2 build-quant/bench/bench_quant                # another kernel family
//
// Rows (state.range: K, N, M, threads):
//   q4/…          Q4NX int4, block 32, int8-row (QD8) activations; the weight
//                 is cache-resident after the first call (the L3 of this
//                 machine holds every shape).
//   q4_cold/…     M = 1 with the packed weight flushed from every cache
//                 before each call (manual timing excludes the flush): the
//                 decode case where the weight streams from DRAM.
//   q4_act/…      cold M = 1 with int8-block or float activations (range 2:
//                 1 = int8-block, 2 = float).
//   q4_block/…    hot prompt rows (M 64 and 256) with int8-block activations,
//                 the default (--act-precision auto).
//   q4_block128/… the same with weight blocks of 128 (onnxruntime's
//                 MatMulNBitsQuantizer default) instead of 32.
//   q8_gemm/…, q8_gemm_cold/…   the same for the q8 GEMM (int8 × int8, float out).
//   vnni_peak/threads   the int8 peak the prompt rows are measured against:
//                 a bare loop of independent 512-bit vpdpbusd (64
//                 multiply-adds each, 128 ops), every thread its own,
//                 counted as GOP/s like the GEMM rows (0 without VNNI).
//   amx_peak/threads    the same for the tile unit (the amx family's prompt
//                 rows): independent 16 × 16 × 64 tdpbssd (skipped without AMX).
//   stream/MiB/threads    read bandwidth: a buffer of that size read with
//                 64-byte (AVX-512) or 32-byte (AVX2) loads, each thread one
//                 contiguous part (as decode splits the weight); 1024 MiB is
//                 DRAM, 4-64 MiB stay in cache.
// Counters: GB/s = packed weight bytes (codes + scales) per second, the
// decode roofline's numerator; GOP/s = 2·M·N·K per second; cpuGB/s (one
// thread) = the same bytes per second of the calling thread's CPU time,
// i.e. the speed of an idle core on a machine other processes load.
#include <benchmark/benchmark.h>
// GCC 12's AVX-512 headers trip -Wuninitialized inside their own
// _mm*_undefined_* helpers (GCC bug 105593), as quant/ukernels/simd_avx512.h
// says; the warning is about them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <time.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench/bench_main.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "quant/q4_gemm.h"
#include "quant/ukernels/amx_tile_config.h"
#include "quant/q8_gemm.h"

namespace {

using namespace onebit;

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Mem = std::unique_ptr<void, Free>;

Mem alloc(size_t bytes) { return Mem(std::aligned_alloc(64, (bytes + 127) / 64 * 64)); }

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Evicts [p, p + bytes) from every cache level of every core. The pool's
// threads share the work, which also keeps them awake for the call that
// follows, as back-to-back kernels of a decode step do. No line past the
// end: a packed weight may end its own mapping, and clflush there faults.
void flush(const void* p, size_t bytes, ThreadPool& pool) {
  const char* c = static_cast<const char*>(p);
  pool.parallel_for(int64_t((bytes + 63) / 64), 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) _mm_clflush(c + i * 64);
    _mm_mfence();
  });
}

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Runs `call` once per iteration; with `cold`, flushes `buffers` first and
// times only the call, after one untimed warm-up call. Returns the calling thread's CPU seconds spent in the
// calls: on a machine other processes load, bytes / that time is the
// kernel's own speed on an idle core (meaningful for one thread).
template <class Call>
double loop(benchmark::State& state, ThreadPool& pool, bool cold,
            const std::vector<std::pair<const void*, size_t>>& buffers, Call&& call) {
  call();  // one-time work (the A8W8 column sums) stays out of the timing
  double cpu = 0.0;
  for (auto _ : state) {
    if (cold)
      for (const auto& [p, n] : buffers) flush(p, n, pool);
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_seconds();
    call();
    cpu += thread_seconds() - c0;
    if (cold) state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    benchmark::ClobberMemory();
  }
  return cpu;
}

void counters(benchmark::State& state, double cpu_seconds, size_t weight_bytes, size_t m, size_t n, size_t k) {
  state.counters["GB/s"] = benchmark::Counter(double(weight_bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GOP/s"] =
      benchmark::Counter(2.0 * double(m) * double(n) * double(k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (state.range(3) == 1 && cpu_seconds > 0)
    state.counters["cpuGB/s"] = double(weight_bytes) * double(state.iterations()) / cpu_seconds / 1e9;
}

// A Q4NX int4 weight with random codes and scales, blocks of `block` along K.
Q4Gemm make_q4(size_t k, size_t n, Q4Act act, ThreadPool* pool, size_t block = 32) {
  std::mt19937 rng(1);
  std::vector<uint8_t> codes((k * n + 1) / 2);
  for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
  std::vector<float> scales = random_floats((k + block - 1) / block * n, 2);
  Q4OnnxWeight w;
  w.k = k;
  w.n = n;
  w.data = codes.data();
  w.block_size = block;
  w.scales = scales.data();
  Q4GemmOptions opt;
  opt.act = act;
  return Q4Gemm(q4_gemm_config(), w, opt, pool);
}

void run_q4(benchmark::State& state, Q4Act act, bool cold, size_t block = 32) {
  const size_t k = size_t(state.range(0)), n = size_t(state.range(1)), m = size_t(state.range(2));
  ThreadPool pool(int(state.range(3)));
  const Q4Gemm gemm = make_q4(k, n, act, &pool, block);
  const std::vector<float> x = random_floats(m * k, 3);
  std::vector<float> y(m * n);
  Mem ws = alloc(gemm.workspace_bytes(m));
  const std::vector<std::pair<const void*, size_t>> buffers = {
      {gemm.packed_codes().as<void>(), gemm.packed_codes().bytes()},
      {gemm.packed_scales().as<void>(), gemm.packed_scales().bytes()}};
  const double cpu = loop(state, pool, cold, buffers, [&] { gemm.run(m, x.data(), k, y.data(), n, ws.get(), &pool); });
  counters(state, cpu, gemm.weight_bytes(), m, n, k);
  const int ai = int(act);
  state.SetLabel(m == 1 ? gemm.config().gemv_name[ai] : gemm.config().gemm_name[ai]);
}

void BM_q4(benchmark::State& state) { run_q4(state, Q4Act::kInt8Row, false); }
void BM_q4_cold(benchmark::State& state) { run_q4(state, Q4Act::kInt8Row, true); }
void BM_q4_block(benchmark::State& state) { run_q4(state, Q4Act::kInt8Block, false); }
void BM_q4_block128(benchmark::State& state) { run_q4(state, Q4Act::kInt8Block, false, 128); }
void BM_q4_act(benchmark::State& state) {
  const Q4Act act = static_cast<Q4Act>(state.range(2));
  state.counters["act"] = double(state.range(2));
  // range(2) is the precision here; the row count is 1.
  const size_t k = size_t(state.range(0)), n = size_t(state.range(1));
  ThreadPool pool(int(state.range(3)));
  const Q4Gemm gemm = make_q4(k, n, act, &pool);
  const std::vector<float> x = random_floats(k, 3);
  std::vector<float> y(n);
  Mem ws = alloc(gemm.workspace_bytes(1));
  const double cpu = loop(state, pool, true,
                          {{gemm.packed_codes().as<void>(), gemm.packed_codes().bytes()},
                           {gemm.packed_scales().as<void>(), gemm.packed_scales().bytes()}},
                          [&] { gemm.run(1, x.data(), k, y.data(), n, ws.get(), &pool); });
  counters(state, cpu, gemm.weight_bytes(), 1, n, k);
  state.SetLabel(gemm.config().gemv_name[int(act)]);
}

void run_q8_gemm(benchmark::State& state, bool cold) {
  const size_t k = size_t(state.range(0)), n = size_t(state.range(1)), m = size_t(state.range(2));
  ThreadPool pool(int(state.range(3)));
  std::mt19937 rng(4);
  std::vector<int8_t> w(k * n), x(m * k);
  for (int8_t& v : w) v = static_cast<int8_t>(rng());
  for (int8_t& v : x) v = static_cast<int8_t>(rng());
  const float sw = 0.01f, sx = 0.02f;
  const int32_t zx = -3;
  Q8Weight aw;
  aw.k = k;
  aw.n = n;
  aw.data = w.data();
  aw.scale = &sw;
  const Q8Gemm gemm(aw, &pool);
  const Q8Activation a{&sx, 1, &zx, 1};
  std::vector<float> y(m * n);
  Mem ws = alloc(gemm.workspace_bytes(m));
  const double cpu = loop(state, pool, cold, {{gemm.packed().as<void>(), gemm.packed_bytes()}},
                          [&] { gemm.run(m, x.data(), k, a, y.data(), n, ws.get(), &pool); });
  counters(state, cpu, gemm.packed_bytes(), m, n, k);
  state.SetLabel(m == 1 ? gemm.config().gemv_name : gemm.config().gemm_name);
}

void BM_q8_gemm(benchmark::State& state) { run_q8_gemm(state, false); }
void BM_q8_gemm_cold(benchmark::State& state) { run_q8_gemm(state, true); }

// OR of every 64-byte line of [p, p + bytes), eight loads in flight.
__attribute__((target("avx512f"))) uint64_t read_lines_avx512(const char* p, size_t bytes) {
  __m512i acc[8];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (size_t i = 0; i + 512 <= bytes; i += 512)
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_or_si512(acc[j], _mm512_load_si512(p + i + 64 * j));
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_or_si512(acc[0], acc[j]);
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, acc[0]);
  return lanes[0] | lanes[1] | lanes[2] | lanes[3] | lanes[4] | lanes[5] | lanes[6] | lanes[7];
}

// The same with 256-bit loads (two per line), for CPUs without AVX-512.
__attribute__((target("avx2"))) uint64_t read_lines_avx2(const char* p, size_t bytes) {
  __m256i acc[8];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  for (size_t i = 0; i + 256 <= bytes; i += 256)
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm256_or_si256(acc[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32 * j)));
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_or_si256(acc[0], acc[j]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0]);
  return lanes[0] | lanes[1] | lanes[2] | lanes[3];
}

uint64_t read_lines(const char* p, size_t bytes) {
  static const bool wide = cpu_supports(Isa::Avx512);
  return wide ? read_lines_avx512(p, bytes) : read_lines_avx2(p, bytes);
}

// `iters` rounds of 16 independent vpdpbusd: enough chains to cover the
// instruction's latency on every core that has it, no loads.
__attribute__((target("avx512f,avx512vnni"))) int32_t dpbusd_loop(int64_t iters) {
  __m512i acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], u, s);
  for (int j = 1; j < 16; ++j) acc[0] = _mm512_add_epi32(acc[0], acc[j]);
  return _mm512_reduce_add_epi32(acc[0]);
}

// `iters` rounds of four independent tdpbssd (C_ij += A_i·B_j, full 16 × 64
// tiles: 16·16·64 multiply-adds each), no loads in the loop.
__attribute__((target("amx-tile,amx-int8"))) int32_t tdpbssd_loop(int64_t iters) {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  alignas(64) int8_t ones[16][64];
  std::memset(ones, 1, sizeof ones);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t out[16][16];
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0][0];
}

// An int8 peak: every thread runs loop(iters) on its own; `ops` a round.
void run_peak(benchmark::State& state, Isa isa, const char* missing, int32_t (*loop)(int64_t), int64_t iters,
              double ops) {
  const int threads = int(state.range(0));
  if (!cpu_supports(isa)) {
    state.SkipWithError(missing);
    return;
  }
  ThreadPool pool(threads);
  for (auto _ : state)
    pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) benchmark::DoNotOptimize(loop(iters));
    });
  state.counters["GOP/s"] =
      benchmark::Counter(double(threads) * double(iters) * ops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_vnni_peak(benchmark::State& state) {
  run_peak(state, Isa::Avx512Vnni, "no AVX-512 VNNI on this CPU", dpbusd_loop, 1 << 16, 16 * 128);
}

// The tile unit's (the amx family's prompt rows): 4·16·16·64 multiply-adds a round.
void BM_amx_peak(benchmark::State& state) {
  run_peak(state, Isa::Amx, "no AMX-INT8 on this CPU (or not granted by the OS)", tdpbssd_loop, 1 << 14,
           4 * 16 * 16 * 64 * 2);
}

void BM_stream(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0)) << 20;
  ThreadPool pool(int(state.range(1)));
  Mem mem = alloc(bytes);
  std::memset(mem.get(), 1, bytes);
  const char* p = static_cast<const char*>(mem.get());
  const int64_t chunks = int64_t(bytes / 512);
  double cpu = 0.0;
  for (auto _ : state) {
    const double c0 = thread_seconds();
    pool.parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      benchmark::DoNotOptimize(read_lines(p + b * 512, size_t(e - b) * 512));
    });
    cpu += thread_seconds() - c0;
  }
  state.counters["GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (state.range(1) == 1) state.counters["cpuGB/s"] = double(bytes) * double(state.iterations()) / cpu / 1e9;
}

// (K, N) of the Qwen3-0.6B projections: q/o, k/v, o, gate/up, down, LM head.
const int64_t kShapes[][2] = {{1024, 2048}, {1024, 1024}, {2048, 1024}, {1024, 3072}, {3072, 1024}, {1024, 151936}};

void gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"K", "N", "M", "threads"});
  for (int64_t m : {1, 128})
    for (const auto& s : kShapes)
      for (int64_t t : {1, 2}) b->Args({s[0], s[1], m, t});
}

void cold_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"K", "N", "M", "threads"});
  for (const auto& s : kShapes)
    for (int64_t t : {1, 2}) b->Args({s[0], s[1], 1, t});
}

void act_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"K", "N", "act", "threads"});
  for (int64_t act : {1, 2})
    for (const auto& s : {kShapes[3], kShapes[5]})
      for (int64_t t : {1, 2}) b->Args({s[0], s[1], act, t});
}

void block_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"K", "N", "M", "threads"});
  for (int64_t m : {64, 256})
    for (const auto& s : kShapes)
      if (s[1] < 100000)  // the LM head runs on the last position only
        for (int64_t t : {1, 2}) b->Args({s[0], s[1], m, t});
}

void stream_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"MiB", "threads"});
  for (int64_t mib : {4, 16, 64, 1024})
    for (int64_t t : {1, 2}) b->Args({mib, t});
}

}  // namespace

BENCHMARK(BM_stream)->Apply(stream_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_q4)->Apply(gemm_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_q4_cold)->Apply(cold_args)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
BENCHMARK(BM_q4_act)->Apply(act_args)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
BENCHMARK(BM_q4_block)->Apply(block_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_q4_block128)->Apply(block_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_vnni_peak)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_amx_peak)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_q8_gemm)->Apply(gemm_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_q8_gemm_cold)->Apply(cold_args)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);

ONEBIT_BENCHMARK_MAIN()
