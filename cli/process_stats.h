// Memory figures the commands print about this process.
#pragma once

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace onebit::cli {

// Peak resident set since the process started, MiB.
inline double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// Resident set now (VmRSS), MiB.
inline double rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

}  // namespace onebit::cli
