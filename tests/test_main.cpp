// The tests' main: Catch2's, after applying ONEBIT_ISA (a cap on the kernel
// families, as the CLI applies it), so a whole test binary can be run as if
// on a lesser CPU; per-ISA cases above the cap report themselves skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "base/cpu_features.h"

int main(int argc, char** argv) {
  if (const char* cap = std::getenv("ONEBIT_ISA")) {
    const auto isa = onebit::parse_isa(cap);
    if (!isa) {
      std::fprintf(stderr, "ONEBIT_ISA=%s is not a kernel family; valid: %s\n", cap, onebit::isa_names().c_str());
      return 2;
    }
    onebit::set_isa_limit(*isa);
  }
  return Catch::Session().run(argc, argv);
}
