// The elementwise microkernels of VecMathConfig (quant/ukernels/
// kernel_config.h) per ISA: exp (every Softmax row), sigmoid (every SwiGlu
// activation), the float32 Softmax row, the float16 conversions (every float16 op's input and
// output) and a float16 export's score chain. Inputs sit in L1, so this is
// the kernels' instruction throughput, the part of a Softmax row or a
// float16 op that is not a memory read.
//
//   ninja -C build bench_vec_math && build/bench/bench_vec_math
//
// BM_vec/ISA/KIND/N: ISA 1 AVX2, 2 AVX-512 (base/cpu_features.h); KIND 0
// exp, 1 sigmoid, 2 widen (float16 -> float32), 3 narrow, 4 the float16
// score chain, 5 a float32 Softmax row (f32_vsoftmax); N elements a call (1056: one SmolLM2 decode row at 1024 of
// past; 4096). Reports elements per second.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <vector>

#include "bench/bench_main.h"
#include "base/cpu_features.h"
#include "base/dtype.h"
#include "quant/ukernels/kernel_config.h"

namespace {

using namespace onebit;

void BM_vec(benchmark::State& state) {
  const Isa isa = static_cast<Isa>(state.range(0));
  const int kind = static_cast<int>(state.range(1));
  const size_t n = static_cast<size_t>(state.range(2));
  const VecMathConfig* cfg = vec_math_config_for(isa);
  if (!cfg) return state.SkipWithError("this CPU lacks the ISA");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> x(n), y(n);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) x[i] = normal(rng), h[i] = float_to_half(x[i]);
  for (auto _ : state) {
    switch (kind) {
      case 0: cfg->exp(n, x.data(), y.data()); break;
      case 1: cfg->sigmoid(n, x.data(), y.data()); break;
      case 2: cfg->widen(n, h.data(), y.data()); break;
      case 3: cfg->narrow(n, x.data(), h.data()); break;
      case 4: y = x, cfg->f16_scale_add(n, y.data(), 0.125f, h.data()); break;
      default: cfg->softmax(n, x.data(), y.data()); break;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(h.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
  static const char* const kKinds[] = {"exp", "sigmoid", "widen", "narrow", "f16 scale+mask", "softmax row"};
  state.SetLabel(fmt::format("{} {}", kKinds[kind], isa == Isa::Avx512 ? "avx512" : "avx2"));
}

}  // namespace

BENCHMARK(BM_vec)->ArgsProduct({{1, 2}, {0, 1, 2, 3, 4, 5}, {1056, 4096}});

ONEBIT_BENCHMARK_MAIN()
