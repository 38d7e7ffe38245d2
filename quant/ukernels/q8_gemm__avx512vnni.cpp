// AVX-512 VNNI A8W8 family: vpdpbusd multiplies unsigned by signed bytes and
// adds groups of four into int32 without saturation, so raw = Σ x·p is exact
// (quant/q8_ukernels.h has the operand domain). Tile 8×32c4: two panels,
// each one 64-byte weight group (a cache line) per 4 k, and sixteen zmm
// accumulators fed by eight 4-byte activation broadcasts; each row count
// below 8 has its own instantiation. The decode kernel walks four panels
// (64 columns) at once: independent vpdpbusd chains over four sequential
// streams; the streams kernel the same over four panels that lie apart
// (a quarter of a thread's share), so each of its streams runs long.
//
// The epilogue evaluates quant/requantize.h's operations lane for lane in
// double precision, so its results are those of q8_store_scalar bit for
// bit; near-tie lanes (about 2⁻¹⁹ of them) go to the scalar resolver.
//
// Compiled with AVX-512 flags: no header templates (std::min and friends)
// whose AVX-512 instantiation the linker could hand to baseline code.

#include "quant/ukernels/q8_avx512.h"
#include "quant/ukernels/q8_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {

namespace {

constexpr size_t kGroup = kQ8VnniNR * kQ8VnniKR;  // 64 bytes: 16 columns × 4 k
constexpr size_t kPrefetchBytes = 1024;            // decode stream look-ahead per panel

// Where the decode prefetch puts the lines: L1 (as first tuned), or L2
// (_l2: on a 2-core Zen 4 VM, where any L1 hint of the 4-bit decode was
// slow too, 9-13 % faster a one-thread `--int8` step and ~8 % a two-thread
// one; docs/BENCHMARK.md "The int8 decode prefetch on Zen 4").
enum class Hint { kL1, kL2 };

inline __m512i bcast_tail(const uint8_t* p, size_t n) {
  uint8_t b[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) b[i] = p[i];
  return bcast4(b);
}

template <bool XS>
inline __m512i dot(__m512i acc, __m512i x, __m512i w) {
  return XS ? dpbusd(acc, w, x) : dpbusd(acc, x, w);
}

// R rows × P panels of 16 columns; each activation broadcast feeds P
// vpdpbusd (8×32: 16 accumulators, 10 loads per 16 vpdpbusd). Each panel's
// accumulators are an array of their own: one [R][P] array (1 KiB) GCC 12
// kept on the stack, a load and a store around every vpdpbusd, at 40-48 %
// of the int8 peak (docs/BENCHMARK.md, "The prompt GEMMs against the int8
// peak").
template <bool XS, int R, int P>
void tile(size_t nc, size_t k, const uint8_t* a, size_t lda, const uint8_t* w, size_t ps, size_t m0, size_t n0,
          const Q8Epilogue& ep, void* c, size_t ldc) {
  static_assert(P == 1 || P == 2, "one or two panels");
  __m512i acc0[R], acc1[R];
  const uint8_t* ar[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    ar[r] = a + r * lda;
    acc0[r] = _mm512_setzero_si512();
    if constexpr (P == 2) acc1[r] = _mm512_setzero_si512();
  }
  const uint8_t* w1 = P == 2 ? w + ps : w;  // with one panel, no pointer past it is formed
  // The K tail first: after the main loop it makes GCC 12 copy every
  // accumulator between registers on each iteration.
  const size_t groups = k / 4;
  if (k % 4) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i x = bcast_tail(ar[r] + 4 * groups, k % 4);
      acc0[r] = dot<XS>(acc0[r], x, _mm512_load_si512(w + groups * kGroup));
      if constexpr (P == 2) acc1[r] = dot<XS>(acc1[r], x, _mm512_load_si512(w1 + groups * kGroup));
    }
  }
  for (size_t g = 0; g < groups; ++g) {
    const __m512i wv0 = _mm512_load_si512(w + g * kGroup);
    const __m512i wv1 = P == 2 ? _mm512_load_si512(w1 + g * kGroup) : wv0;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i x = bcast4(ar[r] + 4 * g);
      acc0[r] = dot<XS>(acc0[r], x, wv0);
      if constexpr (P == 2) acc1[r] = dot<XS>(acc1[r], x, wv1);
    }
  }
  const size_t es = elem_bytes(ep);
  const Cols cols0 = load_cols(ep, n0);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store_row(acc0[r], cols0, m0 + r, nc, ep, static_cast<char*>(c) + r * ldc * es);
  if constexpr (P == 2) {
    const Cols cols1 = load_cols(ep, n0 + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      store_row(acc1[r], cols1, m0 + r, nc - 16, ep, static_cast<char*>(c) + (r * ldc + 16) * es);
  }
}

// One row × P panels, each wherever it lies: w[p] its groups, n0[p] its
// first column, nc[p] the columns stored, c[p] where they go. Adjacent
// panels (gemv_tile) or panels apart in memory (the streams kernel), the
// same sums and epilogue.
template <bool XS, int P, Hint H = Hint::kL1>
void gemv_panels(size_t k, const uint8_t* x, const uint8_t* const* w, const size_t* n0, const size_t* nc,
                 size_t m0, const Q8Epilogue& ep, void* const* c) {
  __m512i acc[P], acc2[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc[p] = acc2[p] = _mm512_setzero_si512();
  const size_t groups = k / 4, pairs = groups / 2;
  // Tails first (see tile).
  if (k % 4) {
    const __m512i xt = bcast_tail(x + 4 * groups, k % 4);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p] = dot<XS>(acc[p], xt, _mm512_load_si512(w[p] + groups * kGroup));
  }
  if (groups % 2) {
    const size_t g = groups - 1;
    const __m512i x0 = bcast4(x + 4 * g);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p] = dot<XS>(acc[p], x0, _mm512_load_si512(w[p] + g * kGroup));
  }
  for (size_t g = 0; g < 2 * pairs; g += 2) {
    const __m512i x0 = bcast4(x + 4 * g), x1 = bcast4(x + 4 * g + 4);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const uint8_t* wp = w[p] + g * kGroup;
      if constexpr (H == Hint::kL1) {
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes + 64), _MM_HINT_T0);
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes + 64), _MM_HINT_T1);
      }
      acc[p] = dot<XS>(acc[p], x0, _mm512_load_si512(wp));
      acc2[p] = dot<XS>(acc2[p], x1, _mm512_load_si512(wp + kGroup));
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) store_row(_mm512_add_epi32(acc[p], acc2[p]), load_cols(ep, n0[p]), m0, nc[p], ep, c[p]);
}

template <bool XS, int P>
void gemv_tile(size_t nc, size_t k, const uint8_t* x, const uint8_t* w, size_t ps, size_t m0, size_t n0,
               const Q8Epilogue& ep, void* c) {
  const uint8_t* wp[P];
  size_t np[P], ncp[P];
  void* cp[P];
  const size_t es = elem_bytes(ep);
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    wp[p] = w + p * ps;
    np[p] = n0 + 16 * p;
    ncp[p] = nc - 16 * p;
    cp[p] = static_cast<char*>(c) + 16 * p * es;
  }
  gemv_panels<XS, P>(k, x, wp, np, ncp, m0, ep, cp);
}

}  // namespace

template <bool XS, int P>
void rows(size_t mr, size_t nc, size_t k, const uint8_t* x, size_t lda, const uint8_t* w, size_t ps, size_t m0,
          size_t n0, const Q8Epilogue& ep, void* c, size_t ldc) {
  switch (mr) {
    case 1: return tile<XS, 1, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    case 2: return tile<XS, 2, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    case 3: return tile<XS, 3, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    case 4: return tile<XS, 4, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    case 5: return tile<XS, 5, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    case 6: return tile<XS, 6, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    case 7: return tile<XS, 7, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
    default: return tile<XS, 8, P>(nc, k, x, lda, w, ps, m0, n0, ep, c, ldc);
  }
}

template <bool XS>
void q8_gemm_ukernel_8x32c4__avx512vnni(size_t mr, size_t nc, size_t k, const void* a, size_t lda,
                                        const uint8_t* w, size_t panel_stride, size_t m0, size_t n0,
                                        const Q8Epilogue& ep, void* c, size_t ldc) {
  const uint8_t* x = static_cast<const uint8_t*>(a);
  if (nc > 16) return rows<XS, 2>(mr, nc, k, x, lda, w, panel_stride, m0, n0, ep, c, ldc);
  rows<XS, 1>(mr, nc, k, x, lda, w, panel_stride, m0, n0, ep, c, ldc);
}

template <bool XS>
void q8_gemv_ukernel_1x64c4__avx512vnni(size_t nc, size_t k, const void* a, const uint8_t* w, size_t panel_stride,
                                        size_t m0, size_t n0, const Q8Epilogue& ep, void* c) {
  const uint8_t* x = static_cast<const uint8_t*>(a);
  switch ((nc + 15) / 16) {
    case 1: return gemv_tile<XS, 1>(nc, k, x, w, panel_stride, m0, n0, ep, c);
    case 2: return gemv_tile<XS, 2>(nc, k, x, w, panel_stride, m0, n0, ep, c);
    case 3: return gemv_tile<XS, 3>(nc, k, x, w, panel_stride, m0, n0, ep, c);
    default: return gemv_tile<XS, 4>(nc, k, x, w, panel_stride, m0, n0, ep, c);
  }
}

namespace {

template <bool XS, Hint H>
void gemv_streams(size_t streams, size_t k, const void* a, const uint8_t* const* w, const size_t* n0,
                  const size_t* nc, const Q8Epilogue& ep, void* const* c) {
  const uint8_t* x = static_cast<const uint8_t*>(a);
  size_t s = 0;
  for (; s + 4 <= streams; s += 4) gemv_panels<XS, 4, H>(k, x, w + s, n0 + s, nc + s, 0, ep, c + s);
  switch (streams - s) {
    case 1: return gemv_panels<XS, 1, H>(k, x, w + s, n0 + s, nc + s, 0, ep, c + s);
    case 2: return gemv_panels<XS, 2, H>(k, x, w + s, n0 + s, nc + s, 0, ep, c + s);
    case 3: return gemv_panels<XS, 3, H>(k, x, w + s, n0 + s, nc + s, 0, ep, c + s);
    default: return;
  }
}

}  // namespace

template <bool XS>
void q8_gemv_streams_ukernel_1x16s4__avx512vnni(size_t streams, size_t k, const void* a, const uint8_t* const* w,
                                                const size_t* n0, const size_t* nc, const Q8Epilogue& ep,
                                                void* const* c) {
  gemv_streams<XS, Hint::kL1>(streams, k, a, w, n0, nc, ep, c);
}
template <bool XS>
void q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2(size_t streams, size_t k, const void* a, const uint8_t* const* w,
                                                   const size_t* n0, const size_t* nc, const Q8Epilogue& ep,
                                                   void* const* c) {
  gemv_streams<XS, Hint::kL2>(streams, k, a, w, n0, nc, ep, c);
}
template void q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2<false>(size_t, size_t, const void*, const uint8_t* const*,
                                                                   const size_t*, const size_t*, const Q8Epilogue&,
                                                                   void* const*);
template void q8_gemv_streams_ukernel_1x16s4__avx512vnni_l2<true>(size_t, size_t, const void*, const uint8_t* const*,
                                                                  const size_t*, const size_t*, const Q8Epilogue&,
                                                                  void* const*);
template void q8_gemv_streams_ukernel_1x16s4__avx512vnni<false>(size_t, size_t, const void*, const uint8_t* const*,
                                                                const size_t*, const size_t*, const Q8Epilogue&,
                                                                void* const*);
template void q8_gemv_streams_ukernel_1x16s4__avx512vnni<true>(size_t, size_t, const void*, const uint8_t* const*,
                                                               const size_t*, const size_t*, const Q8Epilogue&,
                                                               void* const*);

template void q8_gemm_ukernel_8x32c4__avx512vnni<false>(size_t, size_t, size_t, const void*, size_t,
                                                        const uint8_t*, size_t, size_t, size_t, const Q8Epilogue&,
                                                        void*, size_t);
template void q8_gemm_ukernel_8x32c4__avx512vnni<true>(size_t, size_t, size_t, const void*, size_t,
                                                       const uint8_t*, size_t, size_t, size_t, const Q8Epilogue&,
                                                       void*, size_t);
template void q8_gemv_ukernel_1x64c4__avx512vnni<false>(size_t, size_t, const void*, const uint8_t*, size_t, size_t,
                                                        size_t, const Q8Epilogue&, void*);
template void q8_gemv_ukernel_1x64c4__avx512vnni<true>(size_t, size_t, const void*, const uint8_t*, size_t, size_t,
                                                       size_t, const Q8Epilogue&, void*);

}  // namespace onebit
