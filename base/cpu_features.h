// CPU features, read once, and the ISA levels the microkernels are built
// for. cpu_supports() is the one definition of what a level needs; the kernel
// config (quant/ukernels/kernel_config.cpp) picks families with it, and no op
// ever asks. set_isa_limit() caps the level the configs pick (the CLI sets it
// from ONEBIT_ISA), so tests and benchmarks can run every path on one machine.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace onebit {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Vnni = 3, Amx = 4 };
inline constexpr Isa kIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Amx};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avxvnni = false;
  // AMX-TILE and AMX-INT8, enabled by the OS (XCR0) and granted to this
  // process (Linux asks for the tile data state: arch_prctl
  // ARCH_REQ_XCOMP_PERM, requested once when the features are read).
  bool amx_int8 = false;
  unsigned family = 0;  // x86 family as vendors number it (AMD Zen 4: 0x19, Zen 5: 0x1A)
  std::string vendor;   // CPUID leaf 0's 12 characters, e.g. "AuthenticAMD", "GenuineIntel"
  // Vendor and family pick among equal-result kernels tuned per CPU.
  bool amd() const { return vendor == "AuthenticAMD"; }
};

// The family from CPUID leaf 1's EAX: the base family, plus the extended
// family when the base is 0xF.
unsigned x86_family(unsigned cpuid1_eax);

const CpuFeatures& cpu_features();

// Whether this CPU runs code built for `isa`:
//   avx2        AVX2 + FMA + F16C (x86-64-v3, the build's baseline)
//   avx512      avx2 + AVX-512 F, BW, DQ, VL
//   avx512vnni  avx512 + AVX-512 VNNI
//   amx         avx512vnni + AMX-INT8 (the int8 prompt tiles of the 4-bit
//               and A8W8 GEMMs; every other family is avx512vnni's)
bool cpu_supports(Isa isa);
// What `isa` needs that this CPU lacks, e.g. "avx512vnni"; empty if none.
std::string cpu_missing(Isa isa);

// The best level this CPU supports, capped by set_isa_limit.
Isa isa_limit();
// Caps isa_limit(). Call before the first kernel config is read (configs
// are chosen once); a cap above what the CPU supports changes nothing.
void set_isa_limit(Isa cap);
// set_isa_limit by the level's name, as ONEBIT_ISA gives it (empty: no
// cap). Returns "" or, when `name` is no level, the error to report
// ("ONEBIT_ISA=… is not a kernel family; valid: …"), the limit unchanged.
// The CLI, the tests' main and the kernel benchmarks' main apply it.
std::string set_isa_limit_named(std::string_view name);

std::string isa_name(Isa isa);
// One line for benchmark records, e.g. "AuthenticAMD family 0x19, kernels
// avx512vnni": what picks among equal-result kernels, and the level used.
std::string cpu_summary();
// "scalar", "avx2", "avx512", "avx512vnni", "amx" -> the level; anything else: nothing.
std::optional<Isa> parse_isa(std::string_view name);
// "scalar, avx2, avx512, avx512vnni, amx" for error messages.
std::string isa_names();

}  // namespace onebit
