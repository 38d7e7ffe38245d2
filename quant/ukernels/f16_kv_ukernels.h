// Microkernels of the float16 KV cache (--kv-dtype f16): keys and values are
// stored as halves, narrowed once when a position is appended, and read back
// at half the bytes of a float32 cache.
//   vcvt: float16 <-> float32 runs of n elements, round to nearest even
//         (base/dtype.h's float_to_half / half_to_float bit for bit).
//   pv:   Y[m×d] = P[m×t] · V[t×d] with V float16: attention's probabilities
//         times the values, V widened in registers. Every Y element is one
//         FMA chain over j = 0 … t−1 from zero, as the float GEMM's tile and
//         GEMV kernels compute it, so a float16 cache gives exactly the result
//         float32 attention gives on the widened values, whatever m is.
// Named as the other families; the __scalar ones are the reference. Only
// kernel_config.cpp refers to these names; ops/kv_gemm.cpp drives them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

using F16ToF32Ukernel = void (*)(size_t n, const uint16_t* x, float* y);
using F32ToF16Ukernel = void (*)(size_t n, const float* x, uint16_t* y);
// P rows ldp apart, V rows ldv apart (halves), Y rows ldy apart.
using F32F16PvUkernel = void (*)(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                 size_t ldv, float* y, size_t ldy);

void f16_f32_vcvt_ukernel__scalar(size_t n, const uint16_t* x, float* y);
void f16_f32_vcvt_ukernel__avx2(size_t n, const uint16_t* x, float* y);
void f32_f16_vcvt_ukernel__scalar(size_t n, const float* x, uint16_t* y);
void f32_f16_vcvt_ukernel__avx2(size_t n, const float* x, uint16_t* y);
void f32_f16_pv_ukernel__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                size_t ldv, float* y, size_t ldy);
void f32_f16_pv_ukernel_4x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                   size_t ldv, float* y, size_t ldy);

}  // namespace onebit
