// AVX2+FMA float GEMM family: the 6×16 tile (12 ymm accumulators, two B
// vectors and one broadcast fill the 16 registers) and a 1×16 one-row
// kernel. AVX2 masked loads cost extra µops, so the N edge (nc < 16) gets
// its own instantiation and full panels use plain loads. As in the AVX-512
// family, B streams from L2 and is prefetched kPrefetchRows ahead.
//
// Compiled with AVX2 flags: no header templates here (see the AVX-512 file).
#include <immintrin.h>

#include "quant/ukernels/f32_ukernels.h"

namespace onebit {

namespace {

constexpr size_t MR = kF32Avx2MR;
constexpr size_t kPrefetchRows = 16;

alignas(64) const int kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// Lanes [0, n) of 8 set, n clamped to [0, 8].
inline __m256i mask_of(size_t n) {
  if (n > 8) n = 8;
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - n));
}

template <bool Masked>
inline __m256 load(const float* p, __m256i m) {
  if constexpr (Masked) return _mm256_maskload_ps(p, m);
  else return _mm256_loadu_ps(p);
}

template <bool Masked>
inline void store(float* p, __m256i m, __m256 v) {
  if constexpr (Masked) _mm256_maskstore_ps(p, m, v);
  else _mm256_storeu_ps(p, v);
}

template <int R, bool Masked>
void tile(size_t nc, size_t kc, const float* a, const float* b, size_t ldb, float* c, size_t ldc, const float* bias,
          bool accumulate) {
  const __m256i m0 = mask_of(nc), m1 = mask_of(nc > 8 ? nc - 8 : 0);
  __m256 acc0[R], acc1[R];
  if (accumulate) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc0[r] = load<Masked>(c + r * ldc, m0);
      acc1[r] = load<Masked>(c + r * ldc + 8, m1);
    }
  } else {
    const __m256 b0 = bias ? load<Masked>(bias, m0) : _mm256_setzero_ps();
    const __m256 b1 = bias ? load<Masked>(bias + 8, m1) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc0[r] = b0;
      acc1[r] = b1;
    }
  }
  for (size_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * ldb), _MM_HINT_T0);
    const __m256 vb0 = load<Masked>(b, m0);
    const __m256 vb1 = load<Masked>(b + 8, m1);
    b += ldb;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 va = _mm256_broadcast_ss(a + r);
      acc0[r] = _mm256_fmadd_ps(va, vb0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(va, vb1, acc1[r]);
    }
    a += MR;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    store<Masked>(c + r * ldc, m0, acc0[r]);
    store<Masked>(c + r * ldc + 8, m1, acc1[r]);
  }
}

using Tile = void (*)(size_t, size_t, const float*, const float*, size_t, float*, size_t, const float*, bool);

template <bool Masked>
constexpr Tile kTiles[MR + 1] = {nullptr,           tile<1, Masked>, tile<2, Masked>, tile<3, Masked>,
                                 tile<4, Masked>,   tile<5, Masked>, tile<6, Masked>};
static_assert(MR == 6, "kTiles lists one instantiation per row count");

// One row as the tile computes each of its rows (from the bias, one FMA per
// k in order), so decode and a batched pass agree bit for bit.
template <bool Masked>
void gemv(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c, const float* bias) {
  const __m256i m0 = mask_of(nc), m1 = mask_of(nc > 8 ? nc - 8 : 0);
  __m256 s0 = bias ? load<Masked>(bias, m0) : _mm256_setzero_ps();
  __m256 s1 = bias ? load<Masked>(bias + 8, m1) : _mm256_setzero_ps();
  for (size_t i = 0; i < k; ++i, b += ldb) {
    const __m256 va = _mm256_broadcast_ss(a + i);
    s0 = _mm256_fmadd_ps(va, load<Masked>(b, m0), s0);
    s1 = _mm256_fmadd_ps(va, load<Masked>(b + 8, m1), s1);
  }
  store<Masked>(c, m0, s0);
  store<Masked>(c + 8, m1, s1);
}

}  // namespace

void f32_gemm_ukernel_6x16__avx2(size_t mr, size_t nc, size_t kc, const float* a, const float* b, size_t ldb,
                                 float* c, size_t ldc, const float* bias, bool accumulate) {
  (nc == 16 ? kTiles<false> : kTiles<true>)[mr](nc, kc, a, b, ldb, c, ldc, bias, accumulate);
}

void f32_gemv_ukernel_1x16__avx2(size_t nc, size_t k, const float* a, const float* b, size_t ldb, float* c,
                                 const float* bias) {
  if (nc == 16) gemv<false>(nc, k, a, b, ldb, c, bias);
  else gemv<true>(nc, k, a, b, ldb, c, bias);
}

namespace {

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// As the AVX-512 family's dot_rows, 8 lanes at a time.
template <int R>
void dot_rows(size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb, float* c, size_t ldc,
              const float* bias) {
  const size_t kv = k / 8 * 8;
  const __m256i tail = mask_of(k - kv);
  for (size_t j = 0; j < n; ++j, b += ldb) {
    __m256 acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (size_t i = 0; i < kv; i += 8) {
      const __m256 vb = _mm256_loadu_ps(b + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + i), vb, acc[r]);
    }
    if (kv < k) {
      const __m256 vb = _mm256_maskload_ps(b + kv, tail);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_maskload_ps(a + r * lda + kv, tail), vb, acc[r]);
    }
    const float add = bias ? bias[j] : 0.0f;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) c[r * ldc + j] = hsum(acc[r]) + add;
  }
}

}  // namespace

void f32_dot_ukernel_4xn__avx2(size_t m, size_t n, size_t k, const float* a, size_t lda, const float* b, size_t ldb,
                               float* c, size_t ldc, const float* bias) {
  switch (m) {
    case 1: return dot_rows<1>(n, k, a, lda, b, ldb, c, ldc, bias);
    case 2: return dot_rows<2>(n, k, a, lda, b, ldb, c, ldc, bias);
    case 3: return dot_rows<3>(n, k, a, lda, b, ldb, c, ldc, bias);
    default: return dot_rows<4>(n, k, a, lda, b, ldb, c, ldc, bias);
  }
}

namespace {

// y[j..j+8) (lanes under m) through R rows of B.
template <int R, bool Masked>
inline void axpy8(const float* a, const float* b, size_t ldb, float* y, __m256i m) {
  __m256 acc = load<Masked>(y, m);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc = _mm256_fmadd_ps(_mm256_set1_ps(a[r]), load<Masked>(b + r * ldb, m), acc);
  if constexpr (Masked) _mm256_maskstore_ps(y, m, acc);
  else _mm256_storeu_ps(y, acc);
}

template <int R>
void axpy_rows(size_t n, const float* a, const float* b, size_t ldb, float* y) {
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    // 16 columns are a 64-byte line of each row: prefetched 4 KiB ahead into
    // L2 (decode streams B from memory).
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(b + r * ldb + j) + 4096, _MM_HINT_T1);
    axpy8<R, false>(a, b + j, ldb, y + j, __m256i{});
    axpy8<R, false>(a, b + j + 8, ldb, y + j + 8, __m256i{});
  }
  for (; j < n; j += 8) axpy8<R, true>(a, b + j, ldb, y + j, mask_of(n - j));
}

}  // namespace

void f32_axpy_ukernel_8x__avx2(size_t rows, size_t n, const float* a, const float* b, size_t ldb, float* y) {
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
