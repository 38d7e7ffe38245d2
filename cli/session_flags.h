// The session flags `run`, `ort-run` and `bench` share, and the environment:
// declared on a subcommand in one place and turned into SessionOptions in
// one place. This file and cli/environment.cpp are the only code that reads
// environment variables; the library below cli/ is told.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "graph/session_options.h"
#include "npu/select.h"

namespace onebit::cli {

// The ONEBIT_* variables, read and validated once (an unknown ONEBIT_ISA is
// an error listing the valid ones; flags are 0/1, false/true, off/on).
struct Environment {
  bool qdq = true;          // ONEBIT_QDQ=0: QDQ groups run node by node (control run)
  bool qdq_debug = false;   // ONEBIT_QDQ_DEBUG=1: every fusion logs each refusal
  bool q4 = true;           // ONEBIT_Q4=0: 4-bit DequantizeLinear -> MatMul node by node
  bool kv_state = true;     // ONEBIT_KV_STATE=0: keep the exported cache Concats
  bool patch_plans = true;  // ONEBIT_PLAN_PATCH=0: plan every new input shape afresh
  bool regrow_plans = true;  // ONEBIT_PLAN_REGROW=0: patches reshape what a decode step reaches
  bool trace = false;       // ONEBIT_TRACE=1: kernels and passes log their choices
  bool profile = false;     // ONEBIT_PROFILE=1: time per op type
  bool huge_pages = false;  // ONEBIT_HUGE_PAGES=1: pack weights onto huge pages
  std::string isa;          // ONEBIT_ISA: cap on the microkernel families ("" none)
  std::string npu_designs;  // ONEBIT_NPU_DESIGNS: the design table's short form ("" none)
};
const Environment& environment();

// Applies ONEBIT_ISA (base/cpu_features.h set_isa_limit); main() calls it
// before any command runs.
void apply_isa_cap();

// A validator for a flag that takes one of `names`: anything else is an
// error listing them ("--npu: 'gpu' is not one of off, auto, xrt, reference").
CLI::Validator one_of(std::vector<std::string> names);

// --max-memory BYTES on `cmd`: the process's memory budget
// (base/memory_budget.h), applied when parsed; default the physical memory.
void add_max_memory(CLI::App* cmd);

struct SessionFlags {
  int threads = 0;
  bool basic = false;
  bool int8 = false;
  bool pack_weights = false;
  std::string act_precision = "auto";
  std::string kv_dtype = "auto";
  std::string npu = "auto";
  std::string npu_designs;
  bool npu_trace = false;
  int npu_max_contexts = 4;
  std::string variant;  // which model of a folder (--variant)

  void add_to(CLI::App* cmd);
  // Flags over the environment's defaults (without the NPU: see below).
  SessionOptions options() const;
  // The NPU dispatcher --npu asks for (null: host only). The design table
  // comes from --npu-designs, else ONEBIT_NPU_DESIGNS; a malformed one is
  // an error naming the entry.
  std::unique_ptr<npu::Dispatcher> dispatcher() const;
};

}  // namespace onebit::cli
