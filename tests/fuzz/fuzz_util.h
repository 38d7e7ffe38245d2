// Shared by the libFuzzer targets: a scratch directory per process, the
// bytes written to a file there, and the rule every target keeps — a
// onebit::Error is the expected answer to a bad input; anything else that
// escapes (another exception, a crash, a sanitizer report) is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "base/memory_budget.h"

namespace onebit::fuzz {

inline const std::string& scratch() {
  static const std::string dir = [] {
    const auto p = std::filesystem::temp_directory_path() / ("onebit-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(p);
    // A model may ask for any size; the budget turns that into an Error
    // long before the fuzzer's RSS limit, and keeps each unit quick (a 256 MiB
    // Expand took seconds under ASan).
    set_memory_limit(uint64_t{64} << 20);
    return p.string();
  }();
  return dir;
}

inline std::string write(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                static_cast<std::streamsize>(size));
  return path;
}

// Runs `body`; an Error is a clean refusal.
template <class Body>
void expect_clean(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

}  // namespace onebit::fuzz
