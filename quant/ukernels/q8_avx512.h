// The A8W8 epilogue shared by the AVX-512 kernel files
// (q8_gemm__avx512vnni.cpp, q8_gemm__amx.cpp), which alone include this
// header: internal linkage, as simd_avx512.h says why. It evaluates
// quant/requantize.h's operations lane for lane in double precision, so its
// results are those of q8_store_scalar bit for bit; near-tie lanes (about
// 2⁻¹⁹ of them) go to the scalar resolver.
#pragma once

#include "quant/ukernels/q8_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {
namespace {  // deliberately per translation unit

// Column constants of a 16-column block (arrays are padded to whole panels).
struct Cols {
  __m512i c1, cz;
  __m512d sw_lo, sw_hi;
};

inline Cols load_cols(const Q8Epilogue& ep, size_t n0) {
  Cols c;
  c.c1 = _mm512_loadu_si512(ep.c1 + n0);
  c.cz = ep.cz ? _mm512_loadu_si512(ep.cz + n0) : _mm512_setzero_si512();
  c.sw_lo = _mm512_loadu_pd(ep.sw + n0);
  c.sw_hi = _mm512_loadu_pd(ep.sw + n0 + 8);
  return c;
}

// RN32(x·s) via round-to-odd (quant/requantize.cpp, q8_to_f32).
inline __m256 to_f32(__m512d x, __m512d s) {
  const __m512d a = _mm512_mul_pd(x, s);
  const __m512d r = _mm512_fmsub_pd(x, s, a);
  __m512i bits = _mm512_castpd_si512(a);
  const __mmask8 fix = _mm512_testn_epi64_mask(bits, _mm512_set1_epi64(1)) &
                       _mm512_cmp_pd_mask(r, _mm512_setzero_pd(), _CMP_NEQ_OQ);
  const __m512i differ = _mm512_srli_epi64(_mm512_xor_si512(bits, _mm512_castpd_si512(r)), 63);
  const __m512i step = _mm512_sub_epi64(_mm512_set1_epi64(1), _mm512_slli_epi64(differ, 1));
  bits = _mm512_mask_add_epi64(bits, fix, bits, step);
  return _mm512_cvtpd_ps(_mm512_castsi512_pd(bits));
}

// RNE(clamp(x·s/s_y)) before zp_y (quant/requantize.cpp, q8_requantize).
inline __m256i requant(__m512d x, __m512d s, const Q8Requant& q) {
  __m512d v = _mm512_mul_pd(_mm512_mul_pd(x, s), _mm512_set1_pd(q.inv_s_y));
  v = _mm512_min_pd(_mm512_max_pd(v, _mm512_set1_pd(q.lo)), _mm512_set1_pd(q.hi));
  const __m512d frac = _mm512_sub_pd(_mm512_sub_pd(v, _mm512_roundscale_pd(v, _MM_FROUND_TO_NEG_INF)),
                                     _mm512_set1_pd(0.5));
  const __mmask8 near = _mm512_cmp_pd_mask(_mm512_abs_pd(frac), _mm512_set1_pd(kQ8TieWindow), _CMP_LE_OQ);
  if (near) {
    alignas(64) double vv[8], xx[8], ss[8];
    _mm512_store_pd(vv, v);
    _mm512_store_pd(xx, x);
    _mm512_store_pd(ss, s);
    for (int i = 0; i < 8; ++i)
      if (near & (1u << i)) vv[i] = q8_resolve_tie(static_cast<int32_t>(xx[i]), ss[i], vv[i], q.s_y);
    v = _mm512_load_pd(vv);
  }
  return _mm512_cvtpd_epi32(v);
}

// One row of 16 outputs from its raw sums; c points at element (m, n0).
// Called, not inlined: inlined into the 8x32 tile's sixteen stores it spilled
// ~1,800 vector registers a tile (docs/BENCHMARK.md, "The prompt GEMMs
// against the int8 peak").
__attribute__((noinline)) void store_row(__m512i raw, const Cols& cols, size_t m, size_t nc, const Q8Epilogue& ep,
                                        void* c) {
  __m512i acc = _mm512_sub_epi32(raw, _mm512_mullo_epi32(cols.c1, _mm512_set1_epi32(ep.row_sum[m])));
  if (ep.cz) acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(cols.cz, _mm512_set1_epi32(ep.zx[m * ep.zx_step])));
  const __m512d sx = _mm512_set1_pd(double(ep.sx[m * ep.sx_step]));
  const __m512d s_lo = _mm512_mul_pd(sx, cols.sw_lo), s_hi = _mm512_mul_pd(sx, cols.sw_hi);
  const __m512d x_lo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(acc));
  const __m512d x_hi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1));
  const __mmask16 mask = mask16(nc);
  if (ep.out == Q8Out::kF32) {
    const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(to_f32(x_lo, s_lo)), to_f32(x_hi, s_hi), 1);
    _mm512_mask_storeu_ps(c, mask, y);
    return;
  }
  __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(requant(x_lo, s_lo, ep.rq)), requant(x_hi, s_hi, ep.rq), 1);
  q = _mm512_add_epi32(q, _mm512_set1_epi32(ep.rq.zp_y));
  _mm_mask_storeu_epi8(c, mask, _mm512_cvtepi32_epi8(q));  // in [qmin, qmax]: truncation is exact
}

inline size_t elem_bytes(const Q8Epilogue& ep) { return ep.out == Q8Out::kF32 ? 4 : 1; }

}  // namespace
}  // namespace onebit
