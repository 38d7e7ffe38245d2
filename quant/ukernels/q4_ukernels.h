// Q4NX GEMM microkernels (4-bit weights × QD8 / per-block int8 / float
// activations), named <dtypes>_<op>_ukernel_<MR>x<NR>c<KR>__<isa> after
// XNNPACK. Only quant/kernel_config.cpp refers to the names.
//
// Packed weight (quant/q4_gemm.h builds it; one layout for every family):
// panels of 16 columns; per panel, Kp/8 groups of 64 bytes (Q4Group), where
// the 32-bit lane j holds column j's 8 codes of k0..k0+7: byte t has k0+t in
// its low nibble and k0+4+t in its high nibble. A code c ∈ [0, 15] means the
// weight c − z', z' ∈ [0, 15] being the (shifted) zero point of its block:
// int4 w is stored as c = w + 8 with z' = zw + 8; uint4 w as c = w, z' = zw.
// Padding (k ≥ K) has c = z', i.e. weight 0. Beside the codes, per panel:
// scales [blocks][16] float and, when some z' ≠ 8, zero points [blocks][16].
//
// A kernel walks K in blocks of `kblock` (a multiple of 8; the last may be
// shorter) and evaluates, per output, exactly this sequence of operations,
// so every family equals its __scalar twin bit for bit:
//
//   int8-row   (x_u = QD8 byte + 128, zp_u its zero point, s_x its scale)
//     y = 0;  for each block b:  raw_b = Σ_k x_u·(c − z'_b)        (exact int32)
//                               y = fma(float(raw_b), s_b, y)
//     out = fma(fma(−zp_u, g, y), s_x, bias),   g = Σ_b s_b·Σ_k∈b (c − z'_b)
//   int8-block (q symmetric int8 with scale s_xb per row and block, stored
//   as signed bytes, with −8·Σ_k∈b q beside them: Q4Acts::qbias)
//     y = 0;  for each block: acc_b = Σ_k∈b q·(c − z'_b)               (exact int32)
//                            y = fma(float(acc_b), s_b·s_xb, y)
//     out = y + bias
//     Vector kernels compute acc_b as −z'_b·Σ q + Σ c·q, starting the sum
//     from qbias when every z' is 8: the codes are the unsigned operand of
//     vpdpbusd / vpmaddubsw, q the signed one.
//   float      (x float32)
//     y = 0;  for each block: A = Σ x·(c − 8) over k mod 8 < 4, B over the
//             rest, each an fma chain in k order;  t = A + B;
//             with zero points t = fma(−(z'_b − 8), Σ_k∈b x, t);
//             y = fma(t, s_b, y)
//     out = y + bias
//
// Weights are in [−15, 15], so u8 × s8 pairs (vpmaddubsw: 2·255·15 < 2¹⁵)
// and VNNI quads never saturate.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onebit {

// 8 k × 16 columns of 4-bit codes: the unit every Q4 kernel loads.
struct Q4Group {
  uint8_t bytes[64];
};
static_assert(sizeof(Q4Group) == 64, "one cache line per group");

inline constexpr size_t kQ4NR = 16;      // columns per panel
inline constexpr size_t kQ4GroupK = 8;   // k per Q4Group
inline constexpr size_t kQ4KAlign = 32;  // K is padded to a multiple of this

enum class Q4Act : uint8_t { kInt8Row = 0, kInt8Block = 1, kFloat = 2 };
inline constexpr int kQ4ActCount = 3;

// The packed weight as kernels see it; panel p's data is at base + p·stride.
struct Q4Weights {
  const Q4Group* codes = nullptr;  // [panels][Kp/8]
  size_t codes_stride = 0;         // groups per panel
  const float* scale = nullptr;    // [panels][scale rows][16], or null when scale_h holds them
  const uint16_t* scale_h = nullptr;  // the same as float16 (families with f16_scales, every scale exact), or null
  size_t scale_stride = 0;         // floats per panel
  size_t scale_step = 0;           // floats per kernel block: 16 (blocked) or 0 (per channel)
  const uint8_t* zero = nullptr;   // [panels][scale rows][16] z', or null: every z' is 8
  size_t zero_stride = 0;          // bytes per panel (the step is scale_step)
  const float* g = nullptr;        // [Npad] int8-row zero-point correction
  const float* bias = nullptr;     // [Npad] (zeros when there is no bias)
  size_t kp = 0;                   // padded K
  size_t kblock = 0;               // K per kernel block
};

// One call's activations, pointers at the tile's first row.
struct Q4Acts {
  const void* data = nullptr;     // int8-row: uint8 x_u, int8-block: int8 q, float: float; [rows][lda], Kp valid columns
  size_t lda = 0;                 // elements
  const float* scale = nullptr;   // int8-row: [rows] s_x; int8-block: [rows][blocks] s_xb
  const int32_t* zero = nullptr;  // int8-row: [rows] zp_u
  const float* bsum = nullptr;    // float with zero points: [rows][blocks] Σ_k∈b x
  const int32_t* qbias = nullptr; // int8-block: [rows][blocks] −8·Σ_k∈b q (−z'·Σq = z'·qbias/8)
  size_t blocks = 0;              // row stride of the per-block arrays
};

// Rows from r on of a call's activations `a` (precision `act`), as a call of
// their own: the data and the per-row arrays move on r rows. Internal
// linkage, as q4_panel below.
static inline Q4Acts q4_acts_from_row(const Q4Acts& a, Q4Act act, size_t r) {
  Q4Acts part = a;
  const size_t elem = act == Q4Act::kFloat ? sizeof(float) : 1;
  part.data = static_cast<const uint8_t*>(a.data) + r * a.lda * elem;
  if (act == Q4Act::kInt8Row) {
    part.scale = a.scale + r;
    part.zero = a.zero + r;
  } else if (act == Q4Act::kInt8Block) {
    part.scale = a.scale + r * a.blocks;
    part.qbias = a.qbias + r * a.blocks;
  } else {
    part.bsum = a.bsum + r * a.blocks;
  }
  return part;
}

// Where panel p's codes, scales and zero points (null: every z' is 8) start.
// Internal linkage: the ISA files include this under their own flags.
struct Q4Panel {
  const uint8_t* codes;
  const float* scale;       // null when the scales are float16
  const uint8_t* zero;
  const uint16_t* scale_h;  // float16 scales (families with f16_scales), else null
};
static inline Q4Panel q4_panel(const Q4Weights& w, size_t p) {
  return {w.codes[p * w.codes_stride].bytes, w.scale ? w.scale + p * w.scale_stride : nullptr,
          w.zero ? w.zero + p * w.zero_stride : nullptr, w.scale_h ? w.scale_h + p * w.scale_stride : nullptr};
}

// Rows [0, mr) × columns [16·panel, 16·panel + nc) with nc ≤ 16 (gemm) or
// nc ≤ the family's gemv width spread over consecutive panels (gemv, mr = 1).
using Q4GemmUkernel = void (*)(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c,
                               size_t ldc);

// Decode over `streams` panels (at most the family's stream count, at most
// kQ4Streams) that lie apart in memory, read
// side by side: panel[s] of weights *w[s] into c[s] (nc[s] <= 16 columns),
// each output equal bit for bit to the family's gemv on that one panel. The
// weights may differ per stream (sibling GEMMs in one call) but share kp,
// kblock and the scale step; a stream's zero points are read when its
// weights have them.
inline constexpr size_t kQ4Streams = 4;
using Q4GemvStreamsUkernel = void (*)(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                      const Q4Acts& a, float* const* c, const size_t* nc);
template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s2__avx2(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                          const Q4Acts& a, float* const* c, const size_t* nc);
template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s4__avx512vnni(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                                const Q4Acts& a, float* const* c, const size_t* nc);
// The same, prefetching the codes 1 KiB ahead into L1 instead of 4 KiB ahead
// into L2 (measured faster on Zen 5, slower on the Xeon the first was tuned
// on: kernel_config.cpp picks by vendor and generation). Same results bit for
// bit.
template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                                     const Q4Acts& a, float* const* c, const size_t* nc);
// The same, prefetching the codes 1.5 KiB ahead into L2 (measured faster
// on Zen 4 than both). Same results bit for bit.
template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                                       const Q4Acts& a, float* const* c, const size_t* nc);

// Families: template <Q4Act, bool zero_points>.
template <Q4Act A, bool Z>
void q4_gemm_ukernel_4x16c8__scalar(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                    float* c, size_t ldc);
template <Q4Act A, bool Z>
void q4_gemm_ukernel_2x16c8__avx2(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                  float* c, size_t ldc);
template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x32c8__avx2(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                  float* c, size_t ldc);
template <Q4Act A, bool Z>
void q4_gemm_ukernel_8x16c8__avx512(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                    float* c, size_t ldc);
template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x64c8__avx512(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                    float* c, size_t ldc);
template <Q4Act A, bool Z>
void q4_gemm_ukernel_8x16c8__avx512vnni(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                        float* c, size_t ldc);
// AMX (int8 activations only): up to 64 rows a call on the tile unit, 16 at a
// time; a remainder under 16 rows, or a kernel block that is not a multiple
// of 32 (or over 512), on the VNNI tile.
template <Q4Act A, bool Z>
void q4_gemm_ukernel_64x16c32__amx(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                   float* c, size_t ldc);
template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x64c8__avx512vnni(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                        float* c, size_t ldc);

// Packing: `groups` consecutive Q4Groups of one panel from the opset-21
// [K,N] layout. Group i takes rows 8i .. 8i+7 of the panel's 16 columns;
// row r is the 8 bytes at src + r·row_bytes (column 2t in byte t's low
// nibble, 2t + 1 in its high one), every nibble XOR `flip` (8 turns an int4
// w into its code w + 8; 0 keeps a uint4). Adds each column's code sum over
// the groups to sums[16]. Writes each group's 64 bytes once.
using Q4PackUkernel = void (*)(const uint8_t* src, size_t row_bytes, size_t groups, uint8_t flip, Q4Group* out,
                               int32_t* sums);

void q4_pack_ukernel_8x16__scalar(const uint8_t* src, size_t row_bytes, size_t groups, uint8_t flip, Q4Group* out,
                                  int32_t* sums);
void q4_pack_ukernel_8x16__avx2(const uint8_t* src, size_t row_bytes, size_t groups, uint8_t flip, Q4Group* out,
                                int32_t* sums);

}  // namespace onebit
