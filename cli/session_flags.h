// The session flags `run`, `ort-run` and `bench` share: declared on a
// subcommand in one place and turned into SessionOptions (over the
// environment's) in one place.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "graph/passes.h"

namespace onebit::cli {

struct SessionFlags {
  int threads = 0;
  bool basic = false;
  bool int8 = false;
  std::string act_precision = "auto";

  void add_to(CLI::App* cmd) {
    cmd->add_option("--threads", threads, "Threads (default: the machine's cores)");
    cmd->add_flag("--basic", basic, "Basic rewrites only: constant folding and the QDQ fusion (for parity runs)");
    cmd->add_flag("--int8", int8, "Run float MatMuls with constant weights as dynamic int8");
    cmd->add_option("--act-precision", act_precision,
                    "Activations of 4-bit weight GEMMs: auto, int8-row, int8-block, float")
        ->capture_default_str();
  }

  SessionOptions options() const {
    SessionOptions o = SessionOptions::from_env();
    o.threads = threads;
    o.basic = basic;
    o.int8 = int8;
    o.act_precision = act_precision;
    return o;
  }
};

}  // namespace onebit::cli
