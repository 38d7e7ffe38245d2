// Microkernel families are tested one ISA per test case. A family this CPU
// cannot run (or one above the ONEBIT_ISA cap the test main applies) is
// reported as skipped, with the features it lacks: under ctest
// (which sets ONEBIT_CTEST=1 and SKIP_RETURN_CODE 77 on every test) the case
// exits 77 and ctest counts it as skipped; run by hand, Catch prints a
// warning. It is never passed on another ISA.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/cpu_features.h"

namespace onebit::test {

inline constexpr int kSkipReturnCode = 77;

inline bool isa_or_skip(Isa isa) {
  std::string why;
  if (!cpu_supports(isa))
    why = "SKIPPED: the " + isa_name(isa) + " kernels need " + cpu_missing(isa) + ", which this CPU lacks";
  else if (isa > isa_limit())
    why = "SKIPPED: the " + isa_name(isa) + " kernels are above ONEBIT_ISA=" + isa_name(isa_limit());
  if (why.empty()) return true;
  if (std::getenv("ONEBIT_CTEST")) {
    std::printf("%s\n", why.c_str());
    std::fflush(stdout);
    std::_Exit(kSkipReturnCode);
  }
  WARN(why);
  return false;
}

}  // namespace onebit::test

// One test case per ISA: ONEBIT_ISA_CASE("q4 gemm tile edges", "[q4]", Avx2, body)
// defines "q4 gemm tile edges on Avx2", which runs body(Isa::Avx2) or skips.
#define ONEBIT_ISA_CASE(name, tags, isa, body)                                          \
  TEST_CASE(name " on " #isa, tags) {                                                    \
    if (::onebit::test::isa_or_skip(::onebit::Isa::isa)) body(::onebit::Isa::isa);       \
  }
