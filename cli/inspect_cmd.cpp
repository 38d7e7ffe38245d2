// `1bit inspect MODEL`: the census of a model file.
#include <fmt/format.h>

#include "cli/commands.h"
#include "graph/census.h"
#include "graph/onnx/onnx_loader.h"

namespace onebit::cli {

void add_inspect_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("inspect", "Census of a model: opsets, ops, MatMul weight shapes, inputs, outputs");
  struct Args {
    std::string model;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("model", args->model, "ONNX model file")->required();
  cmd->add_flag("--json", args->json, "Print the census as JSON");
  cmd->callback([args, &action] {
    action = [args] {
      const Graph g = load_onnx(args->model);
      const Census c = take_census(g);
      fmt::print("{}", args->json ? census_json(c) : census_text(c));
      return 0;
    };
  });
}

}  // namespace onebit::cli
