// Memory figures the commands print about this process.
#pragma once

#include <sys/resource.h>

#include "base/proc_status.h"

namespace onebit::cli {

// Peak resident set since the process started, MiB.
inline double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// Resident set now (VmRSS), MiB.
inline double rss_mib() { return static_cast<double>(proc_status_kib("VmRSS").value_or(0)) / 1024.0; }

}  // namespace onebit::cli
