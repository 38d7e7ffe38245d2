// Microkernels of attention over a KV cache (ops/kv_gemm.cpp), for keys and
// values stored as float32 or as float16 (--kv-dtype f16: narrowed once when
// a position is appended, widened in registers when read, half the bytes):
//   vcvt: float16 <-> float32 runs of n elements, round to nearest even
//         (base/dtype.h's float_to_half / half_to_float bit for bit).
//   qk:   S[m×t] = Q[m×d] · Kᵀ, K t rows of d. Each score accumulates eight
//         lanes (lane l sums i ≡ l mod 8, one FMA chain in i order from zero)
//         and adds them as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). d a
//         multiple of 8 (the vector kernels fall back to the scalar one,
//         which computes the same, otherwise).
//   pv:   Y[m×d] = P[m×t] · V, V t rows of d: each element one FMA chain over
//         j = 0 … t−1 from zero, as the float GEMM's tile and GEMV kernels
//         compute it.
// int8 (--kv-dtype q8): each position's row of d codes with one float32
// scale (ops/kv_store.h quantizes it); a code widens to scale · code, one
// float32 multiply, in registers, and the kernels sum those values exactly as
// the float32 kernels sum stored floats.
// Every score and every output element is computed the same way whatever m
// is, whichever rows share a call, and for float16 and int8 exactly as for
// float32 on the widened values. Named as the other families; the __scalar ones are the
// reference and do the same float operations in the same order. Only
// kernel_config.cpp refers to these names.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

using F16ToF32Ukernel = void (*)(size_t n, const uint16_t* x, float* y);
using F32ToF16Ukernel = void (*)(size_t n, const float* x, uint16_t* y);
// A float16 export's scores after its product, in place: each y rounded to
// float16, times `scale` rounded to float16, plus the widened float16 mask
// rounded to float16 (the product, Mul and Add nodes, each computing in
// float and rounding once): y = h(h(h(y)·scale) + m), h = round to float16
// and back, as base/dtype.h's float_to_half / half_to_float.
using F16ScaleAddUkernel = void (*)(size_t n, float* y, float scale, const uint16_t* mask);
// Q rows ldq apart, K rows ldk apart, S rows lds apart.
template <class K>
using KvQkUkernel = void (*)(size_t m, size_t t, size_t d, const float* q, size_t ldq, const K* k, size_t ldk,
                             float* s, size_t lds);
// P rows ldp apart, V rows ldv apart, Y rows ldy apart.
template <class V>
using KvPvUkernel = void (*)(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv,
                             float* y, size_t ldy);
// int8 rows: key / value row j's codes at k + j·ldk, its scale at scales[j].
using KvQkQ8Ukernel = void (*)(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k, size_t ldk,
                               const float* scales, float* s, size_t lds);
using KvPvQ8Ukernel = void (*)(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v, size_t ldv,
                               const float* scales, float* y, size_t ldy);

// What an int8 cache row's element stands for: scale · code in float32.
inline float q8_value(float scale, int8_t code) { return scale * static_cast<float>(code); }

void f32_q8_qk_ukernel_2x4__scalar(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                   size_t ldk, const float* scales, float* s, size_t lds);
void f32_q8_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                 size_t ldk, const float* scales, float* s, size_t lds);
void f32_q8_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                   size_t ldk, const float* scales, float* s, size_t lds);
void f32_q8_pv_ukernel_2x32__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                    size_t ldv, const float* scales, float* y, size_t ldy);
void f32_q8_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                  size_t ldv, const float* scales, float* y, size_t ldy);
void f32_q8_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                     size_t ldv, const float* scales, float* y, size_t ldy);

void f32_f16_vscaleadd_ukernel__scalar(size_t n, float* y, float scale, const uint16_t* mask);
void f32_f16_vscaleadd_ukernel__avx2(size_t n, float* y, float scale, const uint16_t* mask);
void f32_f16_vscaleadd_ukernel__avx512(size_t n, float* y, float scale, const uint16_t* mask);

void f16_f32_vcvt_ukernel__scalar(size_t n, const uint16_t* x, float* y);
void f16_f32_vcvt_ukernel__avx2(size_t n, const uint16_t* x, float* y);
void f32_f16_vcvt_ukernel__scalar(size_t n, const float* x, uint16_t* y);
void f32_f16_vcvt_ukernel__avx2(size_t n, const float* x, uint16_t* y);
void f16_f32_vcvt_ukernel__avx512(size_t n, const uint16_t* x, float* y);
void f32_f16_vcvt_ukernel__avx512(size_t n, const float* x, uint16_t* y);

void f32_qk_ukernel_2x4__scalar(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                                float* s, size_t lds);
void f32_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                              float* s, size_t lds);
void f32_f16_qk_ukernel_2x4__scalar(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                    size_t ldk, float* s, size_t lds);
void f32_f16_qk_ukernel_2x4__avx2(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                  size_t ldk, float* s, size_t lds);

void f32_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                                float* s, size_t lds);
void f32_f16_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                    size_t ldk, float* s, size_t lds);

void f32_pv_ukernel_2x32__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v, size_t ldv,
                                 float* y, size_t ldy);
void f32_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v, size_t ldv,
                               float* y, size_t ldy);
void f32_f16_pv_ukernel_2x32__scalar(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                     size_t ldv, float* y, size_t ldy);
void f32_f16_pv_ukernel_2x32__avx2(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                   size_t ldv, float* y, size_t ldy);
void f32_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v,
                                  size_t ldv, float* y, size_t ldy);
void f32_f16_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                      size_t ldv, float* y, size_t ldy);

}  // namespace onebit
