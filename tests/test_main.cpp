// The tests' main: Catch2's, after applying ONEBIT_ISA (a cap on the kernel
// families, as the CLI applies it), so a whole test binary can be run as if
// on a lesser CPU; per-ISA cases above the cap report themselves skipped.
//
// ctest runs each case by name (catch_discover_tests); a name CMake cannot
// carry whole (a ';' splits it into two) would match nothing and pass
// empty, so ctest passes `-w NoTests` (tests/CMakeLists.txt): a spec that
// matches nothing fails. Test names hold no ';'. The console is wide so the
// list of names is never wrapped.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_CONSOLE_WIDTH 1000
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/cpu_features.h"

int main(int argc, char** argv) {
  if (const char* cap = std::getenv("ONEBIT_ISA")) {
    if (const std::string error = onebit::set_isa_limit_named(cap); !error.empty()) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
  }
  return Catch::Session().run(argc, argv);
}
