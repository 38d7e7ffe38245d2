// Each subcommand lives in its own file and registers itself on the app.
// The CLI stays thin: parse, validate, call the library, print.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <functional>

namespace onebit::cli {

// The most text a command reads as one input (ort-run's --prompt-file,
// tokenize's standard input): far past any context (a 128k-token context
// is ~0.5 MB of text), and a bound on what a wrong path (a device, an
// endless pipe) can take.
constexpr size_t kMaxTextInputBytes = size_t{64} << 20;

// A subcommand's action; returns the process exit code.
using Action = std::function<int()>;

void add_run_command(CLI::App& app, Action& action);
void add_inspect_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_ort_run_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_pack_command(CLI::App& app, Action& action);
void add_npu_command(CLI::App& app, Action& action);
void add_chat_command(CLI::App& app, Action& action);

}  // namespace onebit::cli
