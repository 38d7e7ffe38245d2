// Helpers shared by the quant/*__avx512*.cpp kernel files, which alone
// include this header (it needs their AVX-512 flags). Everything here has
// internal linkage: an inline function with external linkage compiled under
// AVX-512 flags is one the linker could hand to baseline code.
//
// GCC 12's AVX-512 headers trip -Wuninitialized inside their own
// _mm*_undefined_* helpers (GCC bug 105593); the warning is about them.
#pragma once
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace onebit {
namespace {  // deliberately per translation unit, see above

// The first n of 16 lanes.
inline __mmask16 mask16(size_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// Four bytes broadcast to every 32-bit lane (vpdpbusd's activation operand).
inline __m512i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// 16 Q4 scales at element `off`: float32 f, or float16 h (exactly widened)
// where the weights keep them so (Q4GemmConfig::f16_scales).
inline __m512 load_scales16(const float* f, const uint16_t* h, size_t off) {
  if (h) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + off)));
  return _mm512_loadu_ps(f + off);
}

// acc + Σ₄ u·s per 32-bit lane: vpdpbusd (u unsigned bytes, s signed).
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }

}  // namespace
}  // namespace onebit
