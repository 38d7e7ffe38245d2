// `1bit`: a command-line LLM runtime with its own ONNX interpreter.
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cli/session_flags.h"
#include "base/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "1bit: run ONNX language models on the CPU with 1bit's own kernels\n\n"
      "  1bit ort-run model.onnx --prompt \"The capital of France is\" -n 32\n"
      "  1bit chat model-cached.onnx\n"
      "  1bit inspect model.onnx\n"
      "  1bit pack model.onnx -o model-q4.onnx\n"
      "  1bit run model.onnx --input input_ids=ids.npy --output-dir out/\n",
      "1bit"};
  app.require_subcommand(1);
  onebit::cli::Action action;
  onebit::cli::add_ort_run_command(app, action);
  onebit::cli::add_chat_command(app, action);
  onebit::cli::add_run_command(app, action);
  onebit::cli::add_inspect_command(app, action);
  onebit::cli::add_bench_command(app, action);
  onebit::cli::add_pack_command(app, action);
  onebit::cli::add_tokenize_command(app, action);
  onebit::cli::add_npu_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    onebit::cli::apply_isa_cap();
    return action ? action() : 0;
  } catch (const onebit::Error& e) {
    std::fprintf(stderr, "1bit: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "1bit: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "1bit: internal error: %s\n", e.what());
    return 2;
  }
}
