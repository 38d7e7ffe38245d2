// AVX-512 VNNI Q4NX family, int8 activations (int8-row and int8-block).
// One 64-byte Q4Group is 8 k × 16 columns; masking and a 16-bit shift split
// it into two registers of 4 k × 16 columns, each feeding one vpdpbusd with
// activation bytes broadcast four at a time:
//   int8-row    the block's zero points are subtracted from the codes
//               bytewise (signed weights in [−15, 15]) and multiply the
//               activations' unsigned bytes x_u;
//   int8-block  the codes themselves are the unsigned operand and q the
//               signed one, each block's sums starting from −z'·Σ_b q
//               (quant/q4_ukernels.h), so a group costs two masks, a shift
//               and the vpdpbusd only.
// The float steps per block follow quant/q4_ukernels.h exactly, so results
// equal the scalar twin's.
//
// gemm: 8 rows × 16 columns. gemv (the one-row call where the driver does
// not use the streams kernel): 1 row × up to 4 panels, one panel after the
// other, so that the codes are read as one sequential stream (consecutive
// panels are contiguous) prefetched kPrefetchBytes ahead into L2, and the
// scales as a second. Four *adjacent* panels side by side read slower from
// DRAM (docs/BENCHMARK.md, "The 4-bit decode: one stream and the codes as
// the unsigned operand"): each of their streams ends after one panel. The
// streams kernel (decode) reads four panels a quarter of a thread's share
// apart side by side, each sub-range in order, so its four streams run
// long: 9-16 % faster a step (docs/BENCHMARK.md, "4-bit decode: four
// streams a thread"). Both run gemv_streams.
//
// Compiled with AVX-512 flags: no header templates (see f32_gemm__avx512.cpp).

#include "quant/ukernels/q4_ukernels.h"
#include "quant/ukernels/q4_avx512.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {

namespace {

// Decode reads the codes as one stream: prefetch into L2 this far ahead.
constexpr size_t kPrefetchBytes = 4096;

// Where the decode kernels prefetch the codes: 4 KiB ahead into L2 (tuned
// on a Sapphire Rapids-class Xeon), 1.5 KiB ahead into L2 (_l2near: on a
// 2-core Zen 4 VM 5 % faster a one-thread step and 3 % a two-thread one
// than 4 KiB, 2 KiB in between), or 1 KiB ahead into L1 (_l1pf: on a 2-core
// Zen 5 VM ~10 % faster a one-thread step than 4 KiB into L2; on Zen 4
// 20–30 % slower); docs/BENCHMARK.md "A Zen 5 VM", "The 4-bit decode
// prefetch on AMD", "A Zen 4 VM" and "The Zen 4 decode prefetch, nearer".
enum class Prefetch { kL2Far, kL2Near, kL1Near };

template <Prefetch P>
__attribute__((always_inline)) inline void prefetch_codes(const uint8_t* group) {
  if constexpr (P == Prefetch::kL1Near) _mm_prefetch(reinterpret_cast<const char*>(group + 1024), _MM_HINT_T0);
  else if constexpr (P == Prefetch::kL2Near) _mm_prefetch(reinterpret_cast<const char*>(group + 1536), _MM_HINT_T1);
  else _mm_prefetch(reinterpret_cast<const char*>(group + kPrefetchBytes), _MM_HINT_T1);
}

// int8-block: where a row's sum over a block starts, −z'·Σq per column
// (quant/q4_ukernels.h): 16 zero-point bytes, or null when every z' is 8.
inline __m512i block_start(const uint8_t* z, int32_t qbias) {
  if (!z) return _mm512_set1_epi32(qbias);
  return _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(z))),
                            _mm512_set1_epi32(qbias / 8));
}

// Prompt tile: rows [0, R) × one panel.
template <Q4Act A, bool Z, int R>
void tile(size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c, size_t ldc) {
  const Q4Panel pan = q4_panel(w, panel);
  const uint8_t *codes = pan.codes, *zero = pan.zero;
  const uint8_t* x = static_cast<const uint8_t*>(a.data);
  __m512 y[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) y[r] = _mm512_setzero_ps();
  size_t b = 0;
  for (size_t k0 = 0; k0 < w.kp; k0 += w.kblock, ++b) {
    const size_t kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    const __m512i zv = A == Q4Act::kInt8Row ? (Z ? expand_zero(zero + b * w.scale_step) : _mm512_set1_epi8(8))
                                            : _mm512_setzero_si512();
    __m512i acc[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      acc[r] = A == Q4Act::kInt8Row ? _mm512_setzero_si512()
                                    : block_start(Z ? zero + b * w.scale_step : nullptr, a.qbias[r * a.blocks + b]);
    // do-while: a block has at least one group, and with the for form GCC 12
    // copies every accumulator between registers on each iteration.
    size_t k = k0;
    do {
      const uint8_t* group = codes + k * 8;
      // The first row tile of a panel reads it from memory: ahead of it.
      _mm_prefetch(reinterpret_cast<const char*>(group + kPrefetchBytes), _MM_HINT_T1);
      const Split s = A == Q4Act::kInt8Row ? split(group, zv) : split(group);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const uint8_t* xr = x + r * a.lda + k;
        if constexpr (A == Q4Act::kInt8Row) acc[r] = dpbusd(dpbusd(acc[r], bcast4(xr), s.lo), bcast4(xr + 4), s.hi);
        else acc[r] = dpbusd(dpbusd(acc[r], s.lo, bcast4(xr)), s.hi, bcast4(xr + 4));
      }
      k += 8;
    } while (k < kend);
    const __m512 sv = load_scales16(pan.scale, pan.scale_h, b * w.scale_step);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if constexpr (A == Q4Act::kInt8Row) {
        y[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), sv, y[r]);
      } else {
        const __m512 sb = _mm512_mul_ps(sv, _mm512_set1_ps(a.scale[r * a.blocks + b]));
        y[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), sb, y[r]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) finish<A>(y[r], w, panel * 16, a, r, nc, c + r * ldc);
}

// acc += Σ₄ u·s per lane, in acc's register: with the intrinsic GCC 12
// copies every decode accumulator to another register each group.
__attribute__((always_inline)) inline void dpbusd_in_place(__m512i& acc, __m512i u, __m512i s) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
}

// One group (8 k) of one panel into a low/high accumulator pair.
template <Q4Act A, Prefetch P>
__attribute__((always_inline)) inline void gemv_group(const uint8_t* group, const uint8_t* x, __m512i zv, __m512i& lo,
                                                      __m512i& hi) {
  prefetch_codes<P>(group);
  if constexpr (A == Q4Act::kInt8Row) {
    const Split s = split(group, zv);
    dpbusd_in_place(lo, bcast4(x), s.lo);
    dpbusd_in_place(hi, bcast4(x + 4), s.hi);
  } else {
    // The high nibbles stay in place (16·code, still an unsigned byte):
    // hi sums 16× their products exactly, unscaled once per block. One
    // shift a group fewer.
    const __m512i v = _mm512_load_si512(group);
    dpbusd_in_place(lo, _mm512_and_si512(v, _mm512_set1_epi8(0x0F)), bcast4(x));
    dpbusd_in_place(hi, _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(0xF0))), bcast4(x + 4));
  }
}

// Decode: one row × S panels, each wherever it lies (apart in memory for
// the streams kernel, so a thread keeps S long code streams and S scale
// streams in flight; one at a time for the gemv). Per panel the exact
// integer block sums (integer adds: any order) and the float steps of
// quant/q4_ukernels.h; a panel's zero points are read when its weights have
// them.
template <Q4Act A, int S, Prefetch P = Prefetch::kL2Far>
void gemv_streams(const Q4Weights* const* w, const size_t* panel, const Q4Acts& a, float* const* c,
                  const size_t* nc) {
  const uint8_t* x = static_cast<const uint8_t*>(a.data);
  __m512 y[S];
  Q4Panel pan[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    pan[s] = q4_panel(*w[s], panel[s]);
    y[s] = _mm512_setzero_ps();
  }
  const size_t kp = w[0]->kp, kblock = w[0]->kblock, step = w[0]->scale_step;
  size_t b = 0;
  for (size_t k0 = 0; k0 < kp; k0 += kblock, ++b) {
    const size_t kend = k0 + kblock < kp ? k0 + kblock : kp;
    __m512i zv[S], lo[S], hi[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const uint8_t* z = pan[s].zero ? pan[s].zero + b * step : nullptr;
      zv[s] = A == Q4Act::kInt8Row ? (z ? expand_zero(z) : _mm512_set1_epi8(8)) : _mm512_setzero_si512();
      lo[s] = A == Q4Act::kInt8Row ? _mm512_setzero_si512() : block_start(z, a.qbias[b]);
      hi[s] = _mm512_setzero_si512();
    }
    // do-while, as in tile: a block has at least one group, and the for
    // form has GCC 12 copy every accumulator between registers each group.
    size_t k = k0;
    do {
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) gemv_group<A, P>(pan[s].codes + k * 8, x + k, zv[s], lo[s], hi[s]);
      k += 8;
    } while (k < kend);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      // exact; int8-block's hi holds 16× its sums (a multiple of 16)
      const __m512i acc = A == Q4Act::kInt8Row ? _mm512_add_epi32(lo[s], hi[s])
                                               : _mm512_add_epi32(lo[s], _mm512_srai_epi32(hi[s], 4));
      const __m512 sv = load_scales16(pan[s].scale, pan[s].scale_h, b * step);
      if constexpr (A == Q4Act::kInt8Row) y[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sv, y[s]);
      else y[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(sv, _mm512_set1_ps(a.scale[b])), y[s]);
    }
  }
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) finish<A>(y[s], *w[s], panel[s] * 16, a, 0, nc[s], c[s]);
}

template <Q4Act A, Prefetch P>
void streams_kernel(size_t streams, const Q4Weights* const* w, const size_t* panel, const Q4Acts& a, float* const* c,
                    const size_t* nc) {
  size_t s = 0;
  for (; s + 4 <= streams; s += 4) gemv_streams<A, 4, P>(w + s, panel + s, a, c + s, nc + s);
  switch (streams - s) {
    case 1: return gemv_streams<A, 1, P>(w + s, panel + s, a, c + s, nc + s);
    case 2: return gemv_streams<A, 2, P>(w + s, panel + s, a, c + s, nc + s);
    case 3: return gemv_streams<A, 3, P>(w + s, panel + s, a, c + s, nc + s);
    default: return;
  }
}

}  // namespace

template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s4__avx512vnni(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                                const Q4Acts& a, float* const* c, const size_t* nc) {
  streams_kernel<A, Prefetch::kL2Far>(streams, w, panel, a, c, nc);
}

template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                                     const Q4Acts& a, float* const* c, const size_t* nc) {
  streams_kernel<A, Prefetch::kL1Near>(streams, w, panel, a, c, nc);
}
template <Q4Act A>
void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near(size_t streams, const Q4Weights* const* w, const size_t* panel,
                                                       const Q4Acts& a, float* const* c, const size_t* nc) {
  streams_kernel<A, Prefetch::kL2Near>(streams, w, panel, a, c, nc);
}
template void q4_gemv_streams_ukernel_1x16s4__avx512vnni<Q4Act::kInt8Row>(size_t, const Q4Weights* const*,
                                                                           const size_t*, const Q4Acts&,
                                                                           float* const*, const size_t*);
template void q4_gemv_streams_ukernel_1x16s4__avx512vnni<Q4Act::kInt8Block>(size_t, const Q4Weights* const*,
                                                                             const size_t*, const Q4Acts&,
                                                                             float* const*, const size_t*);
template void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf<Q4Act::kInt8Row>(size_t, const Q4Weights* const*,
                                                                              const size_t*, const Q4Acts&,
                                                                              float* const*, const size_t*);
template void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l1pf<Q4Act::kInt8Block>(size_t, const Q4Weights* const*,
                                                                                const size_t*, const Q4Acts&,
                                                                                float* const*, const size_t*);

template <Q4Act A, bool Z>
void q4_gemm_ukernel_8x16c8__avx512vnni(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                        float* c, size_t ldc) {
  switch (mr) {
    case 1: return tile<A, Z, 1>(nc, w, panel, a, c, ldc);
    case 2: return tile<A, Z, 2>(nc, w, panel, a, c, ldc);
    case 3: return tile<A, Z, 3>(nc, w, panel, a, c, ldc);
    case 4: return tile<A, Z, 4>(nc, w, panel, a, c, ldc);
    case 5: return tile<A, Z, 5>(nc, w, panel, a, c, ldc);
    case 6: return tile<A, Z, 6>(nc, w, panel, a, c, ldc);
    case 7: return tile<A, Z, 7>(nc, w, panel, a, c, ldc);
    default: return tile<A, Z, 8>(nc, w, panel, a, c, ldc);
  }
}

template <Q4Act A, bool Z>
void q4_gemv_ukernel_1x64c8__avx512vnni(size_t /*mr*/, size_t nc, const Q4Weights& w, size_t panel,
                                        const Q4Acts& a, float* c, size_t /*ldc*/) {
  // Z needs no instantiation of its own: gemv_streams reads w.zero when
  // the weights have zero points (null exactly when Z is false).
  const Q4Weights* ws = &w;
  for (size_t p = 0; 16 * p < nc; ++p) {
    const size_t pn = panel + p, cols = nc - 16 * p < 16 ? nc - 16 * p : 16;
    float* out = c + 16 * p;
    gemv_streams<A, 1>(&ws, &pn, a, &out, &cols);
  }
}

#define INSTANTIATE(A, Z)                                                                                      \
  template void q4_gemm_ukernel_8x16c8__avx512vnni<A, Z>(size_t, size_t, const Q4Weights&, size_t,             \
                                                         const Q4Acts&, float*, size_t);                       \
  template void q4_gemv_ukernel_1x64c8__avx512vnni<A, Z>(size_t, size_t, const Q4Weights&, size_t,             \
                                                         const Q4Acts&, float*, size_t);
INSTANTIATE(Q4Act::kInt8Row, false)
INSTANTIATE(Q4Act::kInt8Row, true)
INSTANTIATE(Q4Act::kInt8Block, false)
INSTANTIATE(Q4Act::kInt8Block, true)
#undef INSTANTIATE

template void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near<Q4Act::kInt8Row>(size_t, const Q4Weights* const*,
                                                                                  const size_t*, const Q4Acts&,
                                                                                  float* const*, const size_t*);
template void q4_gemv_streams_ukernel_1x16s4__avx512vnni_l2near<Q4Act::kInt8Block>(size_t, const Q4Weights* const*,
                                                                                    const size_t*, const Q4Acts&,
                                                                                    float* const*, const size_t*);

}  // namespace onebit
