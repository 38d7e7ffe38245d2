// AMX Q4NX prompt tile, int8 activations (int8-row and int8-block): up to
// 64 rows × one panel a call, each block's integer sums by the tile unit.
//
// K is walked in segments of whole blocks (at most 512 k). A segment's codes
// are unpacked once to signed weights c − z' (the VNNI family's int8-row
// split) in tile B's layout, a row of 64 bytes per 4 k × 16 columns: a
// Q4Group's low nibbles are exactly the row of its first 4 k, its high
// nibbles the next. Then, 16 rows at a time, per block and per 32 k of it:
// tile A is the 16 rows' 32 activation bytes, and one tdpbusd (int8-row:
// x_u unsigned) or tdpbssd (int8-block: q signed) adds A·B into tile C,
// which ends the block holding its 16 × 16 exact int32 sums. C is stored
// and the float step of quant/q4_ukernels.h follows per row in registers,
// as in the VNNI family, so the results equal the scalar twin's bit for bit.
// (The sums are formed otherwise than the VNNI kernel's — c − z' against q
// instead of −z'·Σq + Σ c·q — never different in value: both are exact.)
//
// Rows past the last whole 16, and weights whose kernel block is not a
// multiple of 32 or exceeds a segment (block 16, or per-channel weights
// with such an int8 block), run the VNNI family's tile.
//
// Measured against the VNNI tile on a Xeon with AMX: 1.3–1.4× the GEMM's
// speed at 64 and 256 rows (docs/BENCHMARK.md "AMX: the int8 prompt GEMMs
// on the tile unit"). Block 32 bounds it: every 16 × 16 × 32 product must
// leave the tile for its own float step.
//
// Compiled with AVX-512 VNNI and AMX flags; the tile configuration is
// loaded at every call and released at its end (a thread keeps no tile
// state between calls).

#include "quant/ukernels/amx_tile_config.h"
#include "quant/ukernels/q4_avx512.h"
#include "quant/ukernels/q4_ukernels.h"
#include "quant/ukernels/simd_avx512.h"

namespace onebit {

namespace {

constexpr size_t kTileRows = 16, kChunk = 32;

// Tiles by number (the intrinsics take literals). Blocks alternate between
// two sets, so that the tile unit may sum block b + 1 while the vector unit
// takes block b's float step (on the Xeon this was measured on the two
// hardly overlap, and a third set changed nothing): set P has C = P
// (16 × 16 int32) and B = 4 + P (8 quads × 16 columns × 4 weights); A = 3
// (16 rows × 32 activation bytes) serves both.
constexpr size_t kSets = 2;

void load_tile_config() {
  AmxTileConfig t;
  for (int c = 0; c < 2; ++c) t.colsb[c] = 64, t.rows[c] = kTileRows;
  t.colsb[3] = kChunk, t.rows[3] = kTileRows;
  for (int b = 4; b < 6; ++b) t.colsb[b] = 64, t.rows[b] = kChunk / 4;
  _tile_loadconfig(&t);
}

// C += A·B: x_u unsigned × weights signed (int8-row), or both signed.
#define ONEBIT_TILE_DOT(act, c, a, b)                              \
  do {                                                             \
    if constexpr (act == Q4Act::kInt8Row) _tile_dpbusd(c, a, b);   \
    else _tile_dpbssd(c, a, b);                                    \
  } while (0)
// Block sums on the set with tiles C and B (literal numbers).
#define ONEBIT_BLOCK_SUMS(act, C, B)                                         \
  do {                                                                       \
    _tile_zero(C);                                                           \
    for (size_t k = k0; k < kend; k += kChunk, bt += kChunk / 4 * 64) {      \
      _tile_loadd(3, x + k, lda);                                            \
      _tile_loadd(B, bt, 64);                                                \
      ONEBIT_TILE_DOT(act, C, 3, B);                                         \
    }                                                                        \
    _tile_stored(C, sums, 64);                                               \
  } while (0)

// One block's exact sums for 16 rows into sums, on tile set `set`:
// activations from x (row stride lda) at k0 .. kend, weights from the
// unpacked rows bt (64 bytes a quad of k, the first at k0).
template <Q4Act A>
void block_sums(size_t set, const uint8_t* x, size_t lda, size_t k0, size_t kend, const int8_t* bt,
                int32_t (*sums)[16]) {
  if (set == 0) ONEBIT_BLOCK_SUMS(A, 0, 4);
  else ONEBIT_BLOCK_SUMS(A, 1, 5);
}

#undef ONEBIT_BLOCK_SUMS
#undef ONEBIT_TILE_DOT

// K is walked in segments of whole blocks, at most kSegmentK: a segment's
// codes are unpacked once (8 KiB) and every row pass of the call reads them.
constexpr size_t kSegmentK = 512;
constexpr size_t kMaxRows = 64;

// Blocks [b0, b1) of rows [r0, r0 + 16) of a call into y; the segment's
// unpacked weights start at block b0.
template <Q4Act A>
void pass(const Q4Weights& w, const Q4Panel& pan, const Q4Acts& a, size_t r0, size_t b0, size_t b1,
          const int8_t* seg, float (*y)[16]) {
  constexpr size_t R = kTileRows;
  const uint8_t* x = static_cast<const uint8_t*>(a.data) + r0 * a.lda;
  const size_t lda = a.lda, blocks = a.blocks;
  float(*yr)[16] = y + r0;
  alignas(64) int32_t sums[kSets][R][16];
  auto issue = [&](size_t b) {
    const size_t k0 = b * w.kblock, kend = k0 + w.kblock < w.kp ? k0 + w.kblock : w.kp;
    const size_t set = (b - b0) % kSets;
    block_sums<A>(set, x, lda, k0, kend, seg + (b - b0) * (w.kblock / 4) * 64, sums[set]);
  };
  __m512 acc[R];
#pragma GCC unroll 32
  for (size_t r = 0; r < R; ++r) acc[r] = _mm512_load_ps(yr[r]);
  for (size_t b = b0; b < b1 && b < b0 + kSets - 1; ++b) issue(b);
  for (size_t b = b0; b < b1; ++b) {
    if (b + kSets - 1 < b1) issue(b + kSets - 1);
    // The float step of quant/q4_ukernels.h on block b's sums.
    const int32_t(*s)[16] = sums[(b - b0) % kSets];
    const __m512 sv = load_scales16(pan.scale, pan.scale_h, b * w.scale_step);
    const float* sx = A == Q4Act::kInt8Block ? a.scale + r0 * a.blocks + b : nullptr;
#pragma GCC unroll 32
    for (size_t r = 0; r < R; ++r) {
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(s[r]));
      __m512 sb = sv;
      if constexpr (A == Q4Act::kInt8Block) sb = _mm512_mul_ps(sv, _mm512_set1_ps(sx[r * blocks]));
      acc[r] = _mm512_fmadd_ps(sum, sb, acc[r]);
    }
  }
#pragma GCC unroll 32
  for (size_t r = 0; r < R; ++r) _mm512_store_ps(yr[r], acc[r]);
}

// `rows` (a multiple of 16, at most kMaxRows) × one panel; kblock a
// multiple of 32 and at most kSegmentK.
template <Q4Act A, bool Z>
void tiles(size_t rows, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a, float* c, size_t ldc) {
  const Q4Panel pan = q4_panel(w, panel);
  alignas(64) int8_t seg[kSegmentK / 4][64];
  alignas(64) float y[kMaxRows][16];
  for (size_t r = 0; r < rows; ++r) _mm512_store_ps(y[r], _mm512_setzero_ps());
  const size_t blocks = (w.kp + w.kblock - 1) / w.kblock, seg_blocks = kSegmentK / w.kblock;
  load_tile_config();
  for (size_t b0 = 0; b0 < blocks; b0 += seg_blocks) {
    const size_t b1 = b0 + seg_blocks < blocks ? b0 + seg_blocks : blocks;
    const size_t k0 = b0 * w.kblock, k1 = b1 * w.kblock < w.kp ? b1 * w.kblock : w.kp;
    // The segment's codes less their zero points, a quad of k a row.
    for (size_t b = b0; b < b1; ++b) {
      const __m512i zv = Z ? expand_zero(pan.zero + b * w.scale_step) : _mm512_set1_epi8(8);
      const size_t kb1 = (b + 1) * w.kblock < k1 ? (b + 1) * w.kblock : k1;
      for (size_t k = b * w.kblock; k < kb1; k += 8) {
        const Split s = split(pan.codes + k * 8, zv);
        const size_t q = (k - k0) / 4;
        _mm512_store_si512(seg[q], s.lo);
        _mm512_store_si512(seg[q + 1], s.hi);
      }
    }
    size_t r0 = 0;
    for (; r0 < rows; r0 += kTileRows) pass<A>(w, pan, a, r0, b0, b1, seg[0], y);
  }
  _tile_release();
  for (size_t r = 0; r < rows; ++r) finish<A>(_mm512_load_ps(y[r]), w, panel * 16, a, r, nc, c + r * ldc);
}

}  // namespace

template <Q4Act A, bool Z>
void q4_gemm_ukernel_64x16c32__amx(size_t mr, size_t nc, const Q4Weights& w, size_t panel, const Q4Acts& a,
                                   float* c, size_t ldc) {
  size_t r = 0;
  if (w.kblock % kChunk == 0 && w.kblock <= kSegmentK)
    while (mr - r >= kTileRows) {
      const size_t rows = (mr - r < kMaxRows ? mr - r : kMaxRows) / kTileRows * kTileRows;
      tiles<A, Z>(rows, nc, w, panel, q4_acts_from_row(a, A, r), c + r * ldc, ldc);
      r += rows;
    }
  // The VNNI tile, 8 rows at a time.
  for (; r < mr; r += 8)
    q4_gemm_ukernel_8x16c8__avx512vnni<A, Z>(mr - r < 8 ? mr - r : 8, nc, w, panel, q4_acts_from_row(a, A, r),
                                             c + r * ldc, ldc);
}

#define INSTANTIATE(A, Z)                                                                                 \
  template void q4_gemm_ukernel_64x16c32__amx<A, Z>(size_t, size_t, const Q4Weights&, size_t, const Q4Acts&, \
                                                    float*, size_t);
INSTANTIATE(Q4Act::kInt8Row, false)
INSTANTIATE(Q4Act::kInt8Row, true)
INSTANTIATE(Q4Act::kInt8Block, false)
INSTANTIATE(Q4Act::kInt8Block, true)
#undef INSTANTIATE

}  // namespace onebit
