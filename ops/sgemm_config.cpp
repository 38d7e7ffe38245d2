// The one place that picks a float GEMM family by CPU features.
#include "ops/f32_gemm_ukernels.h"
#include "ops/sgemm.h"

namespace onebit {

namespace {

// KC: the deepest K block whose MR×KC micro-panel of A stays in L1 while B
// streams from L2. Measured on Sapphire Rapids (M = 120, K = 1024, N = 2048,
// one thread): KC 256 → 122 GFLOP/s, 512 → 131, 1024 → 134-148.
const SgemmConfig kScalar{Isa::Scalar, kF32ScalarMR, kF32ScalarNR, 256,
                          f32_gemm_ukernel_4x8__scalar, f32_gemv_ukernel_1x8__scalar, f32_dot_ukernel_4xn__scalar,
                          "f32_gemm_ukernel_4x8__scalar", "f32_gemv_ukernel_1x8__scalar",
                          "f32_dot_ukernel_4xn__scalar"};
const SgemmConfig kAvx2{Isa::Avx2, kF32Avx2MR, kF32Avx2NR, 1024,
                        f32_gemm_ukernel_6x16__avx2, f32_gemv_ukernel_1x16__avx2, f32_dot_ukernel_4xn__avx2,
                        "f32_gemm_ukernel_6x16__avx2", "f32_gemv_ukernel_1x16__avx2",
                          "f32_dot_ukernel_4xn__avx2"};
const SgemmConfig kAvx512{Isa::Avx512, kF32Avx512MR, kF32Avx512NR, 1024,
                          f32_gemm_ukernel_12x32__avx512, f32_gemv_ukernel_1x32__avx512, f32_dot_ukernel_4xn__avx512,
                          "f32_gemm_ukernel_12x32__avx512", "f32_gemv_ukernel_1x32__avx512",
                          "f32_dot_ukernel_4xn__avx512"};

bool cpu_runs(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return f.avx2 && f.fma;
    case Isa::Avx512:
    case Isa::Avx512Vnni: return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
  }
  return false;
}

}  // namespace

const SgemmConfig* sgemm_config_for(Isa isa) {
  if (!cpu_runs(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kScalar;
    case Isa::Avx2: return &kAvx2;
    case Isa::Avx512:
    case Isa::Avx512Vnni: return &kAvx512;
  }
  return nullptr;
}

const SgemmConfig& sgemm_config() {
  static const SgemmConfig& chosen = *sgemm_config_for(cpu_features().level);
  return chosen;
}

}  // namespace onebit
