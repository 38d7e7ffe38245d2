// Each subcommand lives in its own file and registers itself on the app.
// The CLI stays thin: parse, validate, call the library, print.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace onebit::cli {

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
