#include "ops/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace onebit {

namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE;
  f.fma = c & bit_FMA;
  f.f16c = c & bit_F16C;
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = (xcr0 & 0x6) == 0x6;
  const bool zmm = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm && (b & bit_AVX2);
    f.avx512f = zmm && (b & bit_AVX512F);
    f.avx512bw = zmm && (b & bit_AVX512BW);
    f.avx512dq = zmm && (b & bit_AVX512DQ);
    f.avx512vl = zmm && (b & bit_AVX512VL);
    f.avx512vnni = zmm && (c & bit_AVX512VNNI);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = ymm && (a & (1u << 4));
  f.fma = f.fma && ymm;
  f.f16c = f.f16c && ymm;

  Isa level = Isa::Scalar;
  if (f.avx2 && f.fma && f.f16c) level = Isa::Avx2;
  if (level == Isa::Avx2 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl) level = Isa::Avx512;
  if (level == Isa::Avx512 && f.avx512vnni) level = Isa::Avx512Vnni;
  if (const char* cap = std::getenv("ONEBIT_ISA")) {
    Isa limit = level;
    if (std::strcmp(cap, "scalar") == 0) limit = Isa::Scalar;
    else if (std::strcmp(cap, "avx2") == 0) limit = Isa::Avx2;
    else if (std::strcmp(cap, "avx512") == 0) limit = Isa::Avx512;
    else if (std::strcmp(cap, "avx512vnni") == 0) limit = Isa::Avx512Vnni;
    if (limit < level) level = limit;
  }
  f.level = level;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
  }
  return "?";
}

}  // namespace onebit
