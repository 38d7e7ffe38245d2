// A8W8 GEMM microkernels, named <dtypes>_<op>_ukernel_<MR>x<NR>c<KR>__<isa>
// after XNNPACK; "q8" is int8 or uint8 activations times int8 or uint8
// weights, the template flag `XS` (activations signed) picking the variant.
// Only quant/kernel_config.cpp refers to the names.
//
// Operand domain. The packed weight byte is p = w + δ, with δ chosen so that
// the activation byte and p have opposite signedness, which is what
// vpdpbusd (unsigned × signed bytes, exact int32 sums) multiplies:
//   int8 x  → p unsigned: δ = +128 for int8 w, 0 for uint8 w
//   uint8 x → p signed:   δ = 0 for int8 w, −128 for uint8 w
// Shifting the weights (rather than the activations) keeps every correction
// on the row side: Σ x·w = Σ x·p − δ·rowsum_x, so a symmetric graph never
// needs the weight column sums. The exact accumulator is then
//   acc = raw − c1[n]·rowsum[m] − zx[m]·cz[n],
//   raw = Σ_k x·p,  c1 = δ + zw[n],  cz = Σ_k (w − zw[n]) (only when zx ≠ 0),
// evaluated in wrapping int32: every term is an integer and |acc| ≤
// K·255·255 < 2³¹ for K ≤ kQ8MaxK, so the wrapped result is the exact one.
//
// Packed layout for a family with tile (NR, KR): panels of NR columns,
// [N/NR][Kr/KR][NR][KR] bytes with Kr = round_up(K, KR); p = 0 past K and
// past N (adds nothing). The AVX2 family reads activations as int16 pairs
// that the driver widens into the workspace (vpmaddubsw would saturate).
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/requantize.h"

namespace onebit {

// The largest K whose worst-case |acc| = K·255·255 fits in int32.
inline constexpr size_t kQ8MaxK = 33025;

// What the driver binds per call; indexed by absolute row m and column n.
// Column arrays are padded with zeros to whole panels.
struct Q8Epilogue {
  const int32_t* row_sum = nullptr;  // [M]  Σ_k x[m][k]
  const int32_t* zx = nullptr;       // zero point of row m: zx[m·zx_step]
  size_t zx_step = 0;
  const float* sx = nullptr;         // scale of row m: sx[m·sx_step]
  size_t sx_step = 0;
  const int32_t* c1 = nullptr;       // [Npad] δ + zw[n]
  const int32_t* cz = nullptr;       // [Npad] Σ_k (w − zw[n]), or null when every zx is 0
  const double* sw = nullptr;        // [Npad] s_w[n]
  Q8Out out = Q8Out::kF32;
  Q8Requant rq;                      // for quantized outputs
};

// Rows [m0, m0+mr) × columns [n0, n0+nc) of the output, nc ≤ the family's
// gemm_nc (whole panels, `panel_stride` bytes apart).
//   a:  activation row m0 (bytes, or int16 pairs for int16 families), stride lda elements
//   w:  the panel holding column n0: Kr/KR groups of NR×KR bytes
//   c:  output element (m0, n0) (float, int8 or uint8 per ep.out), row stride ldc elements
using Q8GemmUkernel = void (*)(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                               size_t panel_stride, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                               size_t ldc);
// One row (m0) × up to `gemv_nc` columns spanning consecutive panels
// `panel_stride` bytes apart; the decode path of a family without a streams
// kernel.
using Q8GemvUkernel = void (*)(size_t nc, size_t k, const void* a, const uint8_t* w, size_t panel_stride,
                               size_t m0, size_t n0, const Q8Epilogue& ep, void* c);
// Row 0 × `streams` panels (at most the family's stream count, at most
// kQ8Streams) that lie apart in memory, read side by side: panel s's groups
// at w[s], its first column n0[s], nc[s] <= NR columns stored at c[s]. The
// decode path's streams; each output as the gemv computes it, bit for bit.
inline constexpr size_t kQ8Streams = 4;
using Q8GemvStreamsUkernel = void (*)(size_t streams, size_t k, const void* a, const uint8_t* const* w,
                                      const size_t* n0, const size_t* nc, const Q8Epilogue& ep, void* const* c);

inline constexpr size_t kQ8ScalarMR = 2, kQ8ScalarNR = 8, kQ8ScalarKR = 4;
inline constexpr size_t kQ8Avx2MR = 4, kQ8Avx2NR = 16, kQ8Avx2KR = 2, kQ8Avx2GemvNC = 32;
inline constexpr size_t kQ8VnniMR = 8, kQ8VnniNR = 16, kQ8VnniKR = 4, kQ8VnniGemmNC = 32, kQ8VnniGemvNC = 64;

template <bool XS>
void q8_gemm_ukernel_2x8c4__scalar(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                                   size_t panel_stride, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                                   size_t ldc);
template <bool XS>
void q8_gemv_ukernel_1x8c4__scalar(size_t nc, size_t k, const void* a, const uint8_t* w, size_t panel_stride,
                                   size_t m0, size_t n0, const Q8Epilogue& ep, void* c);

template <bool XS>
void q8_gemm_ukernel_4x16c2__avx2(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                                  size_t panel_stride, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                                  size_t ldc);
template <bool XS>
void q8_gemv_ukernel_1x32c2__avx2(size_t nc, size_t k, const void* a, const uint8_t* w, size_t panel_stride,
                                  size_t m0, size_t n0, const Q8Epilogue& ep, void* c);

template <bool XS>
void q8_gemm_ukernel_8x32c4__avx512vnni(size_t mr, size_t nc, size_t k, const void* a, size_t lda,
                                        const uint8_t* w, size_t panel_stride, size_t m0, size_t n0,
                                        const Q8Epilogue& ep, void* c, size_t ldc);
// AMX: up to 32 rows × 32 columns a call on the tile unit, 16 rows at a
// time, on the VNNI family's packing; rows past the last whole 16 on the
// VNNI tile.
template <bool XS>
void q8_gemm_ukernel_32x32c4__amx(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                                  size_t panel_stride, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                                  size_t ldc);
template <bool XS>
void q8_gemv_streams_ukernel_1x16s4__avx512vnni(size_t streams, size_t k, const void* a, const uint8_t* const* w,
                                                const size_t* n0, const size_t* nc, const Q8Epilogue& ep,
                                                void* const* c);
// The same with the decode prefetch into L2 instead of L1 (faster on Zen 4:
// kernel_config.cpp picks by vendor and generation). Same results.
template <bool XS>
void q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2(size_t streams, size_t k, const void* a, const uint8_t* const* w,
                                                   const size_t* n0, const size_t* nc, const Q8Epilogue& ep,
                                                   void* const* c);
template <bool XS>
void q8_gemv_ukernel_1x64c4__avx512vnni(size_t nc, size_t k, const void* a, const uint8_t* w, size_t panel_stride,
                                        size_t m0, size_t n0, const Q8Epilogue& ep, void* c);

// Packing: `groups` groups of KR rows × nr columns of the [K,N] byte layout
// into one panel's [groups][nr][KR] (quant/q8_gemm.h): row t of group g is
// read at src + (g·KR + t)·ldw, and every byte is XOR `flip` (0x80 moves a
// weight into the operand domain, w + delta with delta = ±128; 0 keeps it).
// The vector packers take nr a multiple of 16.
using Q8PackUkernel = void (*)(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out);
void q8_pack_ukernel_c2__scalar(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out);
void q8_pack_ukernel_c4__scalar(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out);
void q8_pack_ukernel_c2__avx2(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out);
void q8_pack_ukernel_c4__avx2(const uint8_t* src, size_t ldw, size_t groups, size_t nr, uint8_t flip, uint8_t* out);

// The scalar epilogue for one element, shared by the scalar kernels and the
// vector kernels' tails: `raw` is Σ x·p as wrapped int32.
void q8_store_scalar(uint32_t raw, size_t m, size_t n, const Q8Epilogue& ep, void* c, size_t index);

}  // namespace onebit
