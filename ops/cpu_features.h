// CPU features, read once. Kernel choice by ISA happens in one config per
// kernel family (e.g. ops/sgemm_config.cpp, quant/kernel_config.cpp), never
// inside an op. ONEBIT_ISA=scalar|avx2|avx512 caps what the configs may pick,
// so tests and benchmarks can run every path on one machine.
#pragma once

#include <string>

namespace onebit {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Vnni = 3 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avxvnni = false;
  // The best ISA level available and allowed by ONEBIT_ISA.
  Isa level = Isa::Scalar;
};

const CpuFeatures& cpu_features();
std::string isa_name(Isa isa);

}  // namespace onebit
