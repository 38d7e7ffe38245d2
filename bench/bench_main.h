// main() of the kernel benchmarks: ONEBIT_ISA=scalar|avx2|avx512|avx512vnni|amx
// caps the kernel families as it does for `1bit` (an unknown name is an
// error), then Google Benchmark runs.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/cpu_features.h"

namespace onebit::bench {

// Applies ONEBIT_ISA; false (after saying why) when it names no level.
inline bool apply_isa_env() {
  const char* name = std::getenv("ONEBIT_ISA");
  const std::string error = set_isa_limit_named(name ? name : "");
  if (!error.empty()) std::fprintf(stderr, "%s\n", error.c_str());
  return error.empty();
}

}  // namespace onebit::bench

#define ONEBIT_BENCHMARK_MAIN()                                          \
  int main(int argc, char** argv) {                                      \
    if (!::onebit::bench::apply_isa_env()) return 2;                     \
    ::benchmark::Initialize(&argc, argv);                                \
    if (::benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;  \
    ::benchmark::RunSpecifiedBenchmarks();                               \
    return 0;                                                            \
  }
