// AVX2 A8W8 family. vpmaddubsw would add two u8×s8 products into a
// saturating int16 (255·127·2 > 32767), so this family widens both operands
// to int16 and uses vpmaddwd, whose two products sum exactly into int32:
// the driver widens the activations once per call into the workspace as
// int16 pairs; the weights are widened in registers from 32-byte groups of
// 16 columns × 2 k. Tile 4×16c2 (eight ymm accumulators); the decode kernel
// walks two panels (32 columns) at once.
//
// The epilogue evaluates quant/requantize.h's operations lane for lane in
// double precision, so its results equal q8_store_scalar's bit for bit.
//
// Compiled with AVX2 flags: no header templates (see f32_gemm__avx512.cpp).
#include <immintrin.h>

#include <cstring>

#include "quant/ukernels/q8_ukernels.h"

namespace onebit {

namespace {

constexpr size_t kGroup = kQ8Avx2NR * kQ8Avx2KR;  // 32 bytes: 16 columns × 2 k

// p is unsigned when the activations are signed (operand domain).
template <bool XS>
inline __m256i widen(const uint8_t* p) {
  const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
  return XS ? _mm256_cvtepu8_epi16(b) : _mm256_cvtepi8_epi16(b);
}

inline __m256i pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// RN32(x·s) via round-to-odd (quant/requantize.cpp, q8_to_f32).
inline __m128 to_f32(__m256d x, __m256d s) {
  const __m256d a = _mm256_mul_pd(x, s);
  const __m256d r = _mm256_fmsub_pd(x, s, a);
  const __m256i one = _mm256_set1_epi64x(1);
  __m256i bits = _mm256_castpd_si256(a);
  const __m256i even = _mm256_cmpeq_epi64(_mm256_and_si256(bits, one), _mm256_setzero_si256());
  const __m256i inexact = _mm256_castpd_si256(_mm256_cmp_pd(r, _mm256_setzero_pd(), _CMP_NEQ_OQ));
  const __m256i differ = _mm256_srli_epi64(_mm256_xor_si256(bits, _mm256_castpd_si256(r)), 63);
  const __m256i step = _mm256_sub_epi64(one, _mm256_slli_epi64(differ, 1));
  bits = _mm256_add_epi64(bits, _mm256_and_si256(step, _mm256_and_si256(even, inexact)));
  return _mm256_cvtpd_ps(_mm256_castsi256_pd(bits));
}

// RNE(clamp(x·s/s_y)) before zp_y (quant/requantize.cpp, q8_requantize).
inline __m128i requant(__m256d x, __m256d s, const Q8Requant& q) {
  __m256d v = _mm256_mul_pd(_mm256_mul_pd(x, s), _mm256_set1_pd(q.inv_s_y));
  v = _mm256_min_pd(_mm256_max_pd(v, _mm256_set1_pd(q.lo)), _mm256_set1_pd(q.hi));
  const __m256d frac = _mm256_sub_pd(_mm256_sub_pd(v, _mm256_floor_pd(v)), _mm256_set1_pd(0.5));
  const __m256d mag = _mm256_andnot_pd(_mm256_set1_pd(-0.0), frac);
  const int near = _mm256_movemask_pd(_mm256_cmp_pd(mag, _mm256_set1_pd(kQ8TieWindow), _CMP_LE_OQ));
  if (near) {
    alignas(32) double vv[4], xx[4], ss[4];
    _mm256_store_pd(vv, v);
    _mm256_store_pd(xx, x);
    _mm256_store_pd(ss, s);
    for (int i = 0; i < 4; ++i)
      if (near & (1 << i)) vv[i] = q8_resolve_tie(static_cast<int32_t>(xx[i]), ss[i], vv[i], q.s_y);
    v = _mm256_load_pd(vv);
  }
  return _mm256_cvtpd_epi32(v);
}

// Eight outputs of row m from their raw sums; c points at element (m, n0).
void store8(__m256i raw, size_t m, size_t n0, size_t nc, const Q8Epilogue& ep, void* c) {
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.c1 + n0));
  __m256i acc = _mm256_sub_epi32(raw, _mm256_mullo_epi32(c1, _mm256_set1_epi32(ep.row_sum[m])));
  if (ep.cz) {
    const __m256i cz = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ep.cz + n0));
    acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(cz, _mm256_set1_epi32(ep.zx[m * ep.zx_step])));
  }
  const __m256d sx = _mm256_set1_pd(double(ep.sx[m * ep.sx_step]));
  const __m256d s_lo = _mm256_mul_pd(sx, _mm256_loadu_pd(ep.sw + n0));
  const __m256d s_hi = _mm256_mul_pd(sx, _mm256_loadu_pd(ep.sw + n0 + 4));
  const __m256d x_lo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(acc));
  const __m256d x_hi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(acc, 1));
  if (ep.out == Q8Out::kF32) {
    const __m256 y = _mm256_set_m128(to_f32(x_hi, s_hi), to_f32(x_lo, s_lo));
    if (nc >= 8) {
      _mm256_storeu_ps(static_cast<float*>(c), y);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, y);
      std::memcpy(c, tmp, nc * sizeof(float));
    }
    return;
  }
  const __m128i zp = _mm_set1_epi32(ep.rq.zp_y);
  const __m128i q_lo = _mm_add_epi32(requant(x_lo, s_lo, ep.rq), zp);
  const __m128i q_hi = _mm_add_epi32(requant(x_hi, s_hi, ep.rq), zp);
  const __m128i q16 = _mm_packs_epi32(q_lo, q_hi);  // values are in [qmin, qmax]: no saturation
  const __m128i q8 = ep.out == Q8Out::kS8 ? _mm_packs_epi16(q16, q16) : _mm_packus_epi16(q16, q16);
  alignas(16) uint8_t tmp[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), q8);
  std::memcpy(c, tmp, nc >= 8 ? 8 : nc);
}

inline size_t elem_bytes(const Q8Epilogue& ep) { return ep.out == Q8Out::kF32 ? 4 : 1; }

// 16 outputs (two halves of 8) of row m.
inline void store16(__m256i lo, __m256i hi, size_t m, size_t n0, size_t nc, const Q8Epilogue& ep, void* c) {
  store8(lo, m, n0, nc, ep, c);
  if (nc > 8) store8(hi, m, n0 + 8, nc - 8, ep, static_cast<char*>(c) + 8 * elem_bytes(ep));
}

template <bool XS, int R>
void tile(size_t nc, size_t k, const int16_t* a, size_t lda, const uint8_t* w, size_t m0, size_t n0,
          const Q8Epilogue& ep, void* c, size_t ldc) {
  __m256i acc0[R], acc1[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_si256();
  const size_t pairs = (k + 1) / 2;
  for (size_t g = 0; g < pairs; ++g) {
    const __m256i w0 = widen<XS>(w + g * kGroup), w1 = widen<XS>(w + g * kGroup + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256i x = pair(a + r * lda + 2 * g);
      acc0[r] = _mm256_add_epi32(acc0[r], _mm256_madd_epi16(x, w0));
      acc1[r] = _mm256_add_epi32(acc1[r], _mm256_madd_epi16(x, w1));
    }
  }
  const size_t es = elem_bytes(ep);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store16(acc0[r], acc1[r], m0 + r, n0, nc, ep, static_cast<char*>(c) + r * ldc * es);
}

template <bool XS, int P>
void gemv_tile(size_t nc, size_t k, const int16_t* x, const uint8_t* w, size_t ps, size_t m0, size_t n0,
               const Q8Epilogue& ep, void* c) {
  __m256i acc0[P], acc1[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc0[p] = acc1[p] = _mm256_setzero_si256();
  const size_t pairs = (k + 1) / 2;
  for (size_t g = 0; g < pairs; ++g) {
    const __m256i xv = pair(x + 2 * g);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const uint8_t* wp = w + p * ps + g * kGroup;
      acc0[p] = _mm256_add_epi32(acc0[p], _mm256_madd_epi16(xv, widen<XS>(wp)));
      acc1[p] = _mm256_add_epi32(acc1[p], _mm256_madd_epi16(xv, widen<XS>(wp + 16)));
    }
  }
  const size_t es = elem_bytes(ep);
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
    store16(acc0[p], acc1[p], m0, n0 + 16 * p, nc - 16 * p, ep, static_cast<char*>(c) + 16 * p * es);
}

}  // namespace

template <bool XS>
void q8_gemm_ukernel_4x16c2__avx2(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                                  size_t /*panel_stride*/, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                                  size_t ldc) {
  const int16_t* x = static_cast<const int16_t*>(a);
  switch (mr) {
    case 1: return tile<XS, 1>(nc, k, x, lda, w, m0, n0, ep, c, ldc);
    case 2: return tile<XS, 2>(nc, k, x, lda, w, m0, n0, ep, c, ldc);
    case 3: return tile<XS, 3>(nc, k, x, lda, w, m0, n0, ep, c, ldc);
    default: return tile<XS, 4>(nc, k, x, lda, w, m0, n0, ep, c, ldc);
  }
}

template <bool XS>
void q8_gemv_ukernel_1x32c2__avx2(size_t nc, size_t k, const void* a, const uint8_t* w, size_t panel_stride,
                                  size_t m0, size_t n0, const Q8Epilogue& ep, void* c) {
  const int16_t* x = static_cast<const int16_t*>(a);
  if (nc > 16) return gemv_tile<XS, 2>(nc, k, x, w, panel_stride, m0, n0, ep, c);
  gemv_tile<XS, 1>(nc, k, x, w, panel_stride, m0, n0, ep, c);
}

template void q8_gemm_ukernel_4x16c2__avx2<false>(size_t, size_t, size_t, const void*, size_t, const uint8_t*,
                                                  size_t, size_t, size_t, const Q8Epilogue&, void*, size_t);
template void q8_gemm_ukernel_4x16c2__avx2<true>(size_t, size_t, size_t, const void*, size_t, const uint8_t*,
                                                 size_t, size_t, size_t, const Q8Epilogue&, void*, size_t);
template void q8_gemv_ukernel_1x32c2__avx2<false>(size_t, size_t, const void*, const uint8_t*, size_t, size_t,
                                                  size_t, const Q8Epilogue&, void*);
template void q8_gemv_ukernel_1x32c2__avx2<true>(size_t, size_t, const void*, const uint8_t*, size_t, size_t,
                                                 size_t, const Q8Epilogue&, void*);

}  // namespace onebit
