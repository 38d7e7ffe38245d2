#include "base/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace onebit {

unsigned x86_family(unsigned cpuid1_eax) {
  const unsigned base = (cpuid1_eax >> 8) & 0xF;
  return base == 0xF ? base + ((cpuid1_eax >> 20) & 0xFF) : base;
}

namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[12];
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &c, 4);
    f.vendor.assign(v, sizeof v);
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.family = x86_family(a);
  const bool osxsave = c & bit_OSXSAVE;
  f.fma = c & bit_FMA;
  f.f16c = c & bit_F16C;
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = (xcr0 & 0x6) == 0x6;
  const bool zmm = (xcr0 & 0xe6) == 0xe6;
  bool amx_cpu = false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm && (b & bit_AVX2);
    f.avx512f = zmm && (b & bit_AVX512F);
    f.avx512bw = zmm && (b & bit_AVX512BW);
    f.avx512dq = zmm && (b & bit_AVX512DQ);
    f.avx512vl = zmm && (b & bit_AVX512VL);
    f.avx512vnni = zmm && (c & bit_AVX512VNNI);
    amx_cpu = (d & (1u << 24)) && (d & (1u << 25));  // EDX: AMX-TILE, AMX-INT8
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = ymm && (a & (1u << 4));
  // The OS enables the tile state (XCR0 bits 17, 18); Linux then hands the
  // 8 KiB of tile data to a process that asks (a tile instruction without
  // it is SIGILL).
  const bool tiles = (xcr0 & 0x60000) == 0x60000;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  f.amx_int8 = amx_cpu && tiles && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  f.fma = f.fma && ymm;
  f.f16c = f.f16c && ymm;
  return f;
}

std::atomic<int> g_cap{static_cast<int>(Isa::Amx)};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string cpu_missing(Isa isa) {
  const CpuFeatures& f = cpu_features();
  std::string missing;
  auto need = [&](bool have, const char* name) {
    if (have) return;
    if (!missing.empty()) missing += ' ';
    missing += name;
  };
  if (isa >= Isa::Avx2) {
    need(f.avx2, "avx2");
    need(f.fma, "fma");
    need(f.f16c, "f16c");
  }
  if (isa >= Isa::Avx512) {
    need(f.avx512f, "avx512f");
    need(f.avx512bw, "avx512bw");
    need(f.avx512dq, "avx512dq");
    need(f.avx512vl, "avx512vl");
  }
  if (isa >= Isa::Avx512Vnni) need(f.avx512vnni, "avx512vnni");
  if (isa >= Isa::Amx) need(f.amx_int8, "amx-int8");
  return missing;
}

bool cpu_supports(Isa isa) { return cpu_missing(isa).empty(); }

Isa isa_limit() {
  static const Isa best = [] {
    Isa level = Isa::Scalar;
    for (Isa isa : kIsas)
      if (cpu_supports(isa)) level = isa;
    return level;
  }();
  const Isa cap = static_cast<Isa>(g_cap.load(std::memory_order_relaxed));
  return cap < best ? cap : best;
}

void set_isa_limit(Isa cap) { g_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }

std::string set_isa_limit_named(std::string_view name) {
  if (name.empty()) return "";
  const std::optional<Isa> isa = parse_isa(name);
  if (!isa) return "ONEBIT_ISA=" + std::string(name) + " is not a kernel family; valid: " + isa_names();
  set_isa_limit(*isa);
  return "";
}

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Amx: return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kIsas)
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  char family[16];
  std::snprintf(family, sizeof family, "0x%X", f.family);
  return (f.vendor.empty() ? std::string("unknown vendor") : f.vendor) + " family " + family + ", kernels " +
         isa_name(isa_limit());
}

std::string isa_names() {
  std::string s;
  for (Isa isa : kIsas) s += (s.empty() ? "" : ", ") + isa_name(isa);
  return s;
}

}  // namespace onebit
