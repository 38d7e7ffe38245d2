// AMX A8W8 prompt tile: up to 32 rows × two panels (32 columns) a call,
// raw = Σ x·p summed by the tile unit over all of K, then the VNNI family's
// epilogue (quant/ukernels/q8_avx512.h), so every output equals
// q8_store_scalar's bit for bit.
//
// The VNNI family's packed panel, [Kr/4][16][4] bytes, is tile B's layout
// as it lies: 16 of its 64-byte groups are one B tile of 64 k. Tile A is 16
// activation rows × 64 bytes. tdpbsud (x signed, p unsigned) or tdpbusd (x
// unsigned, p signed) adds A·B into tile C in wrapping int32, as vpdpbusd
// does, so raw is the VNNI kernel's to the bit. The last chunk of K, when
// K is not a multiple of 64, is copied into zeroed buffers first (p is 0
// past K in the packing; the copy keeps the loads inside the activations).
// Rows past the last whole 16 run the VNNI tile.
//
// Compiled with AVX-512 VNNI and AMX flags; the tile configuration is
// loaded at every call and released at its end.

#include <cstring>

#include "quant/ukernels/amx_tile_config.h"
#include "quant/ukernels/q8_avx512.h"
#include "quant/ukernels/q8_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {

namespace {

constexpr size_t kTileRows = 16, kChunk = 64;
constexpr size_t kGroup = kQ8VnniNR * kQ8VnniKR;  // 64 bytes: 16 columns × 4 k

// Tiles by number (the intrinsics take literals): C of row tile t and panel
// p is 2t + p; A of row tile t is 4 + t; B of panel p is 6 + p. All 16 rows
// × 64 bytes.
void load_tile_config() {
  AmxTileConfig t;
  for (int i = 0; i < 8; ++i) t.colsb[i] = 64, t.rows[i] = kTileRows;
  _tile_loadconfig(&t);
}

// C += A·B in the operand domain of quant/q8_ukernels.h.
#define ONEBIT_TILE_DOT(xs, c, a, b)            \
  do {                                          \
    if constexpr (xs) _tile_dpbsud(c, a, b);    \
    else _tile_dpbusd(c, a, b);                 \
  } while (0)

// One chunk of 64 k: A rows at a (stride lda), B panels' groups at b0, b1,
// into the T × P C tiles.
template <bool XS, int T, int P>
inline void chunk(const uint8_t* a, size_t lda, const uint8_t* b0, const uint8_t* b1) {
  _tile_loadd(4, a, lda);
  if constexpr (T == 2) _tile_loadd(5, a + kTileRows * lda, lda);
  _tile_loadd(6, b0, kGroup);
  if constexpr (P == 2) _tile_loadd(7, b1, kGroup);
  ONEBIT_TILE_DOT(XS, 0, 4, 6);
  if constexpr (P == 2) ONEBIT_TILE_DOT(XS, 1, 4, 7);
  if constexpr (T == 2) {
    ONEBIT_TILE_DOT(XS, 2, 5, 6);
    if constexpr (P == 2) ONEBIT_TILE_DOT(XS, 3, 5, 7);
  }
}

#undef ONEBIT_TILE_DOT

// 16·T rows × P panels.
template <bool XS, int T, int P>
void tiles(size_t nc, size_t k, const uint8_t* a, size_t lda, const uint8_t* w, size_t ps, size_t m0, size_t n0,
           const Q8Epilogue& ep, void* c, size_t ldc) {
  constexpr size_t R = kTileRows * T;
  const uint8_t* w1 = P == 2 ? w + ps : w;  // one panel: no pointer past the weights
  load_tile_config();
  _tile_zero(0);
  if constexpr (P == 2) _tile_zero(1);
  if constexpr (T == 2) {
    _tile_zero(2);
    if constexpr (P == 2) _tile_zero(3);
  }
  const size_t whole = k / kChunk * kChunk;
  for (size_t k0 = 0; k0 < whole; k0 += kChunk)
    chunk<XS, T, P>(a + k0, lda, w + k0 / 4 * kGroup, w1 + k0 / 4 * kGroup);
  if (whole < k) {
    // The last chunk from zeroed copies: the activations' tail bytes, and
    // the panels' remaining groups (Kr/4 of them in all).
    alignas(64) uint8_t at[R][kChunk], bt[2][kChunk / 4][kGroup];
    std::memset(at, 0, sizeof at);
    std::memset(bt, 0, sizeof bt);
    for (size_t r = 0; r < R; ++r) std::memcpy(at[r], a + r * lda + whole, k - whole);
    const size_t groups = (k - whole + 3) / 4;
    std::memcpy(bt[0], w + whole / 4 * kGroup, groups * kGroup);
    if constexpr (P == 2) std::memcpy(bt[1], w1 + whole / 4 * kGroup, groups * kGroup);
    chunk<XS, T, P>(at[0], kChunk, bt[0][0], bt[1][0]);
  }
  alignas(64) int32_t raw[R][P * 16];
  _tile_stored(0, raw[0], P * 64);
  if constexpr (P == 2) _tile_stored(1, raw[0] + 16, P * 64);
  if constexpr (T == 2) {
    _tile_stored(2, raw[kTileRows], P * 64);
    if constexpr (P == 2) _tile_stored(3, raw[kTileRows] + 16, P * 64);
  }
  _tile_release();
  const size_t es = elem_bytes(ep);
  const Cols cols0 = load_cols(ep, n0);
  for (size_t r = 0; r < R; ++r)
    store_row(_mm512_load_si512(raw[r]), cols0, m0 + r, nc, ep, static_cast<char*>(c) + r * ldc * es);
  if constexpr (P == 2) {
    const Cols cols1 = load_cols(ep, n0 + 16);
    for (size_t r = 0; r < R; ++r)
      store_row(_mm512_load_si512(raw[r] + 16), cols1, m0 + r, nc - 16, ep,
                static_cast<char*>(c) + (r * ldc + 16) * es);
  }
}

template <bool XS, int T>
void panels(size_t nc, size_t k, const uint8_t* a, size_t lda, const uint8_t* w, size_t ps, size_t m0, size_t n0,
            const Q8Epilogue& ep, void* c, size_t ldc) {
  if (nc > 16) return tiles<XS, T, 2>(nc, k, a, lda, w, ps, m0, n0, ep, c, ldc);
  tiles<XS, T, 1>(nc, k, a, lda, w, ps, m0, n0, ep, c, ldc);
}

}  // namespace

template <bool XS>
void q8_gemm_ukernel_32x32c4__amx(size_t mr, size_t nc, size_t k, const void* a, size_t lda, const uint8_t* w,
                                  size_t panel_stride, size_t m0, size_t n0, const Q8Epilogue& ep, void* c,
                                  size_t ldc) {
  const uint8_t* x = static_cast<const uint8_t*>(a);
  const size_t es = elem_bytes(ep);
  size_t r = 0;
  for (; mr - r >= 2 * kTileRows; r += 2 * kTileRows)
    panels<XS, 2>(nc, k, x + r * lda, lda, w, panel_stride, m0 + r, n0, ep, static_cast<char*>(c) + r * ldc * es,
                  ldc);
  for (; mr - r >= kTileRows; r += kTileRows)
    panels<XS, 1>(nc, k, x + r * lda, lda, w, panel_stride, m0 + r, n0, ep, static_cast<char*>(c) + r * ldc * es,
                  ldc);
  // The VNNI tile, 8 rows at a time.
  for (; r < mr; r += 8)
    q8_gemm_ukernel_8x32c4__avx512vnni<XS>(mr - r < 8 ? mr - r : 8, nc, k, x + r * lda, lda, w, panel_stride,
                                           m0 + r, n0, ep, static_cast<char*>(c) + r * ldc * es, ldc);
}

template void q8_gemm_ukernel_32x32c4__amx<false>(size_t, size_t, size_t, const void*, size_t, const uint8_t*,
                                                  size_t, size_t, size_t, const Q8Epilogue&, void*, size_t);
template void q8_gemm_ukernel_32x32c4__amx<true>(size_t, size_t, size_t, const void*, size_t, const uint8_t*,
                                                 size_t, size_t, size_t, const Q8Epilogue&, void*, size_t);

}  // namespace onebit
