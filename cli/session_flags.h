// The session flags `run`, `ort-run` and `bench` share, and the environment:
// declared on a subcommand in one place and turned into SessionOptions in
// one place. This file and cli/environment.cpp are the only code that reads
// environment variables; the library below cli/ is told.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "graph/session_options.h"

namespace onebit::cli {

// The ONEBIT_* variables, read and validated once (an unknown ONEBIT_ISA is
// an error listing the valid ones; flags are 0/1, false/true, off/on).
struct Environment {
  bool qdq = true;          // ONEBIT_QDQ=0: QDQ groups run node by node (control run)
  bool qdq_debug = false;   // ONEBIT_QDQ_DEBUG=1: every fusion logs each refusal
  bool q4 = true;           // ONEBIT_Q4=0: 4-bit DequantizeLinear -> MatMul node by node
  bool kv_state = true;     // ONEBIT_KV_STATE=0: keep the exported cache Concats
  bool trace = false;       // ONEBIT_TRACE=1: kernels and passes log their choices
  bool profile = false;     // ONEBIT_PROFILE=1: time per op type
  bool huge_pages = false;  // ONEBIT_HUGE_PAGES=1: pack weights onto huge pages
  std::string isa;          // ONEBIT_ISA: cap on the microkernel families ("" none)
};
const Environment& environment();

// Applies ONEBIT_ISA (base/cpu_features.h set_isa_limit); main() calls it
// before any command runs.
void apply_isa_cap();

struct SessionFlags {
  int threads = 0;
  bool basic = false;
  bool int8 = false;
  ActPrecision act_precision = ActPrecision::kAuto;

  void add_to(CLI::App* cmd);
  // Flags over the environment's defaults.
  SessionOptions options() const;
};

}  // namespace onebit::cli
