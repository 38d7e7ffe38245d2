// AVX-512 KV kernels. Q·Kᵀ: kv_qk.h in row blocks of 4, a decode's stream
// prefetched kQkAhead bytes ahead. P·V: 2 rows × 128 columns of accumulators
// (16 zmm), so a value row of up to 128 elements is read once, in order, for
// both rows (prefetched kPvAhead bytes ahead), and sixteen independent FMA
// chains hide the FMA latency. Wider heads go 128 columns at a time, the
// rest by 16-column masked blocks. Each element is one FMA chain over the
// positions from zero, as kv_ukernels.h fixes (the AVX2 and scalar kernels,
// and the float GEMM, compute the same).
#include "quant/ukernels/simd_avx512.h"

#include <algorithm>

#include "quant/ukernels/kv_qk.h"
#include "quant/ukernels/kv_ukernels.h"

namespace onebit {

namespace {

// Software prefetch distance of a decode's cache stream, in bytes: the
// hardware prefetcher alone left an int8 cache read from DRAM at a quarter
// of a plain read (docs/BENCHMARK.md, "Prefetching the KV stream").
constexpr size_t kQkAhead = 1024;
constexpr size_t kPvAhead = 2048;

__m512 load16(const float* p, __mmask16 m, __m512) { return _mm512_maskz_loadu_ps(m, p); }
__m512 load16(const uint16_t* p, __mmask16 m, __m512) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const __m256i*>(p)));
}
// int8 codes: scale · code (q8_value); masked-off lanes load 0.
__m512 load16(const int8_t* p, __mmask16 m, __m512 scale) {
  const __m128i c = _mm_maskz_loadu_epi8(m, reinterpret_cast<const __m128i*>(p));
  return _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)));
}

// R rows × B blocks of 16 columns (the last one `tail` lanes wide); sc: int8
// values' scales (null otherwise).
template <int R, int B, class V>
void block(size_t t, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy, __mmask16 tail,
           const float* sc) {
  __m512 acc[R][B];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  for (size_t j = 0; j < t; ++j, v += ldv) {
    const char* ahead = reinterpret_cast<const char*>(v) + kPvAhead;
#pragma GCC unroll 8
    for (size_t off = 0; off < B * 16 * sizeof(V); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    if (sc) _mm_prefetch(reinterpret_cast<const char*>(sc + j) + 256, _MM_HINT_T0);
    __m512 x[B];
    const __m512 vs = sc ? _mm512_set1_ps(sc[j]) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) x[b] = load16(v + 16 * b, b == B - 1 ? tail : __mmask16(0xFFFF), vs);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(p[r * ldp + j]);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b) acc[r][b] = _mm512_fmadd_ps(s, x[b], acc[r][b]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) _mm512_mask_storeu_ps(y + r * ldy + 16 * b, b == B - 1 ? tail : __mmask16(0xFFFF), acc[r][b]);
}

template <int R, class V>
void rows(size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
          const float* sc) {
  size_t c = 0;
  for (; c + 128 <= d; c += 128) block<R, 8>(t, p, ldp, v + c, ldv, y + c, ldy, __mmask16(0xFFFF), sc);
  for (; c < d; c += 16) block<R, 1>(t, p, ldp, v + c, ldv, y + c, ldy, mask16(d - c), sc);
}

template <class V>
void pv(size_t m, size_t t, size_t d, const float* p, size_t ldp, const V* v, size_t ldv, float* y, size_t ldy,
        const float* sc = nullptr) {
  for (size_t r = 0; r < m; r += 2) {
    if (m - r >= 2) rows<2>(t, d, p + r * ldp, ldp, v, ldv, y + r * ldy, ldy, sc);
    else rows<1>(t, d, p + r * ldp, ldp, v, ldv, y + r * ldy, ldy, sc);
  }
}

}  // namespace

// Q·Kᵀ as the AVX2 kernel computes it, in row blocks of 4 (the AVX-512
// registers ymm16-31 hold the extra accumulators): a prompt's scores at
// twice the FMAs per load.
void f32_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const float* k, size_t ldk,
                                float* s, size_t lds) {
  if (d % 8 != 0) return f32_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  kv_qk<4, kQkAhead>(m, t, d, q, ldq, k, ldk, s, lds);
}
void f32_f16_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const uint16_t* k,
                                    size_t ldk, float* s, size_t lds) {
  if (d % 8 != 0) return f32_f16_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, s, lds);
  kv_qk<4, kQkAhead>(m, t, d, q, ldq, k, ldk, s, lds);
}

void f32_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const float* v,
                                  size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}
void f32_f16_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const uint16_t* v,
                                      size_t ldv, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy);
}

void f32_q8_qk_ukernel_4x4__avx512(size_t m, size_t t, size_t d, const float* q, size_t ldq, const int8_t* k,
                                   size_t ldk, const float* scales, float* s, size_t lds) {
  if (d % 8 != 0) return f32_q8_qk_ukernel_2x4__scalar(m, t, d, q, ldq, k, ldk, scales, s, lds);
  kv_qk<4, kQkAhead>(m, t, d, q, ldq, k, ldk, s, lds, scales);
}
void f32_q8_pv_ukernel_2x128__avx512(size_t m, size_t t, size_t d, const float* p, size_t ldp, const int8_t* v,
                                     size_t ldv, const float* scales, float* y, size_t ldy) {
  pv(m, t, d, p, ldp, v, ldv, y, ldy, scales);
}

}  // namespace onebit
