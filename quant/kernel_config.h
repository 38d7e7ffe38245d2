// Integer GEMM kernel families (XNNPACK's "gemm config"), picked in
// quant/kernel_config.cpp by cpu_features().level, which ONEBIT_ISA caps.
// The *_for(isa) forms return the family for exactly that level, or null
// when this CPU cannot run it, so tests and benchmarks reach every path.
#pragma once

#include <cstddef>

#include "ops/cpu_features.h"
#include "quant/q4_ukernels.h"
#include "quant/q8_ukernels.h"

namespace onebit {

// A8W8 (quant/qgemm_a8w8.h). Indexed [x signed].
struct QGemmConfig {
  Isa isa;
  size_t mr, nr, kr;   // tile rows, panel width, k per packed group
  size_t gemm_nc;      // columns one gemm call covers (whole panels)
  size_t gemv_nc;      // columns one gemv call covers (whole panels)
  bool int16_acts;     // activations widened to int16 pairs in the workspace
  Q8GemmUkernel gemm[2];
  Q8GemvUkernel gemv[2];
  const char* gemm_name;
  const char* gemv_name;
};

const QGemmConfig& qgemm_config();
const QGemmConfig* qgemm_config_for(Isa isa);

// Q4NX (quant/q4_gemm.h). Indexed [Q4Act][has zero points].
struct Q4GemmConfig {
  Isa isa;
  size_t mr[kQ4ActCount];       // tile rows of gemm
  size_t gemv_nc[kQ4ActCount];  // columns per gemv call (multiple of 16)
  Q4GemmUkernel gemm[kQ4ActCount][2];
  Q4GemmUkernel gemv[kQ4ActCount][2];
  const char* gemm_name[kQ4ActCount];
  const char* gemv_name[kQ4ActCount];
};

const Q4GemmConfig& q4_gemm_config();
const Q4GemmConfig* q4_gemm_config_for(Isa isa);

}  // namespace onebit
