// AVX-512 float GEMM family: a 12×32 tile (24 zmm accumulators, two B
// vectors, one broadcast; 14 loads per 24 FMAs keeps both FMA ports fed) and
// a 1×32 one-row kernel for decode. The tile's A micro-panel sits in L1 while
// the B block streams from L2, so B is prefetched kPrefetchRows ahead
// (measured: +8 % at M = 128 over relying on the hardware prefetcher). Masked loads and stores handle N edges at
// no cost, so panels of an unpacked B need no copying; M edges use the same
// template instantiated for fewer rows.
//
// This file is compiled with AVX-512 flags: it uses no header templates
// (std::min and friends) whose AVX-512 instantiation the linker could hand
// to baseline code.
#include <immintrin.h>

#include "quant/ukernels/f32_ukernels.h"

namespace onebit {

namespace {

constexpr size_t MR = kF32Avx512MR;
constexpr size_t kPrefetchRows = 16;

inline __mmask16 mask_of(size_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

// R rows × V vectors of 16 columns.
template <int R, int V>
void tile(size_t nc, size_t kc, const float* a, const float* b, size_t ldb, float* c, size_t ldc, const float* bias,
          bool accumulate) {
  const __mmask16 m0 = mask_of(nc), m1 = mask_of(nc > 16 ? nc - 16 : 0);
  __m512 acc0[R], acc1[R];
  if (accumulate) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc0[r] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
      if (V == 2) acc1[r] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
    }
  } else {
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = bias && V == 2 ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc0[r] = b0;
      acc1[r] = b1;
    }
  }
  for (size_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * ldb), _MM_HINT_T0);
    if (V == 2) _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * ldb + 16), _MM_HINT_T0);
    const __m512 vb0 = _mm512_maskz_loadu_ps(m0, b);
    const __m512 vb1 = V == 2 ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_setzero_ps();
    b += ldb;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 va = _mm512_set1_ps(a[r]);
      acc0[r] = _mm512_fmadd_ps(va, vb0, acc0[r]);
      if (V == 2) acc1[r] = _mm512_fmadd_ps(va, vb1, acc1[r]);
    }
    a += MR;
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc0[r]);
    if (V == 2) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc1[r]);
  }
}

using Tile = void (*)(size_t, size_t, const float*, const float*, size_t, float*, size_t, const float*, bool);

template <int V>
constexpr Tile kTiles[MR + 1] = {nullptr,        tile<1, V>,  tile<2, V>, tile<3, V>, tile<4, V>,
                                 tile<5, V>,     tile<6, V>,  tile<7, V>, tile<8, V>, tile<9, V>,
                                 tile<10, V>,    tile<11, V>, tile<12, V>};
static_assert(MR == 12, "kTiles lists one instantiation per row count");

}  // namespace

void f32_gemm_ukernel_12x32__avx512(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                    float* c, size_t ldc, const float* bias, bool accumulate) {
  (nc > 16 ? kTiles<2> : kTiles<1>)[mr](nc, kc, a, b, ldb, c, ldc, bias, accumulate);
}

// One row, computed exactly as the tile computes each of its rows: the
// accumulators start at the bias and take one FMA per k, k in order, so a
// row's result does not depend on how many rows the call has (decode and a
// batched verification of drafted tokens agree bit for bit). Two chains per
// panel bound the pace at 128 bytes per FMA latency, above any thread's
// memory stream; the hardware prefetcher follows the linear read.
void f32_gemv_ukernel_1x32__avx512(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                   const float* bias) {
  const __mmask16 m0 = mask_of(nc), m1 = mask_of(nc > 16 ? nc - 16 : 0);
  __m512 s0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  __m512 s1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
  for (size_t i = 0; i < k; ++i, b += ldb) {
    _mm_prefetch(reinterpret_cast<const char*>(b) + 4096, _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(b) + 4096 + 64, _MM_HINT_T1);
    const __m512 va = _mm512_set1_ps(a[i]);
    s0 = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m0, b), s0);
    s1 = _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m1, b + 16), s1);
  }
  _mm512_mask_storeu_ps(c, m0, s0);
  _mm512_mask_storeu_ps(c + 16, m1, s1);
}

namespace {

// R rows of A against one row of B per step: each B row is read once (one
// linear stream through K), R dot products accumulate 16 lanes at a time and
// reduce at the end of the row.
template <int R>
void dot_rows(size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb, float* c, size_t ldc,
              const float* bias) {
  const size_t kv = k / 16 * 16;
  const __mmask16 tail = mask_of(k - kv);
  for (size_t j = 0; j < n; ++j, b += ldb) {
    __m512 acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (size_t i = 0; i < kv; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(b + i) + 4096, _MM_HINT_T1);
      const __m512 vb = _mm512_loadu_ps(b + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(a + r * lda + i), vb, acc[r]);
    }
    if (kv < k) {
      const __m512 vb = _mm512_maskz_loadu_ps(tail, b + kv);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + r * lda + kv), vb, acc[r]);
    }
    const float add = bias ? bias[j] : 0.0f;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) c[r * ldc + j] = _mm512_reduce_add_ps(acc[r]) + add;
  }
}

}  // namespace

void f32_dot_ukernel_4xn__avx512(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b,
                                 size_t ldb, float* c, size_t ldc, const float* bias) {
  switch (m) {
    case 1: return dot_rows<1>(n, k, a, lda, b, ldb, c, ldc, bias);
    case 2: return dot_rows<2>(n, k, a, lda, b, ldb, c, ldc, bias);
    case 3: return dot_rows<3>(n, k, a, lda, b, ldb, c, ldc, bias);
    default: return dot_rows<4>(n, k, a, lda, b, ldb, c, ldc, bias);
  }
}

namespace {

// y[j..j+16) (lanes under m) through R rows of B. Each line of B read is
// followed by a prefetch into L2 of the same columns kF32AxpyRows rows on,
// which the next call reads (decode streams B from memory: 8 rows, 8
// streams a thread, read 2.5-5 % faster than 4 on a 2-vCPU Xeon,
// docs/BENCHMARK.md "The float32 decode: eight rows a call").
template <int R>
inline void axpy16(const __m512* av, const float* b, size_t ldb, float* y, __mmask16 m) {
  __m512 acc = _mm512_maskz_loadu_ps(m, y);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(b + (r + kF32AxpyRows) * ldb), _MM_HINT_T1);
    acc = _mm512_fmadd_ps(av[r], _mm512_maskz_loadu_ps(m, b + r * ldb), acc);
  }
  _mm512_mask_storeu_ps(y, m, acc);
}

template <int R>
void axpy_rows(size_t n, const float* a, const float* b, size_t ldb, float* y) {
  __m512 av[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) av[r] = _mm512_set1_ps(a[r]);
  size_t j = 0;
  for (; j + 16 <= n; j += 16) axpy16<R>(av, b + j, ldb, y + j, __mmask16(0xFFFF));
  if (j < n) axpy16<R>(av, b + j, ldb, y + j, mask_of(n - j));
}

}  // namespace

void f32_axpy_ukernel_8x__avx512(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y) {
  switch (rows) {
    case 1: return axpy_rows<1>(n, a, b, ldb, y);
    case 2: return axpy_rows<2>(n, a, b, ldb, y);
    case 3: return axpy_rows<3>(n, a, b, ldb, y);
    case 4: return axpy_rows<4>(n, a, b, ldb, y);
    case 5: return axpy_rows<5>(n, a, b, ldb, y);
    case 6: return axpy_rows<6>(n, a, b, ldb, y);
    case 7: return axpy_rows<7>(n, a, b, ldb, y);
    default: return axpy_rows<8>(n, a, b, ldb, y);
  }
}

}  // namespace onebit
