// Fields of /proc/self/status: this process's memory as the kernel counts it.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

namespace onebit {

// The value of a "Name:   123 kB" line (VmRSS, VmHWM, RssFile, ...) in KiB;
// nullopt where the kernel does not report that field.
inline std::optional<int64_t> proc_status_kib(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 && line[field.size()] == ':')
      return std::stoll(line.substr(field.size() + 1));
  return std::nullopt;
}

}  // namespace onebit
