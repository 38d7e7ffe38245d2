// `1bit inspect MODEL`: the census of a model file.
#include <fmt/format.h>

#include "cli/commands.h"
#include "base/error.h"
#include "graph/census.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/op_registry.h"
#include "models/model_files.h"
#include "ops/register_ops.h"

namespace onebit::cli {

void add_inspect_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("inspect", "Census of a model: opsets, ops, MatMul weight shapes, inputs, outputs");
  struct Args {
    std::string model;
    bool json = false;
    bool ops = false;
    std::string variant;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("model", args->model, "ONNX model file, or a model folder");
  cmd->add_option("--variant", args->variant, "For a folder with several models: which (fp32, q4, fp16, int8, ...)");
  cmd->add_flag("--json", args->json, "Print the census as JSON");
  cmd->add_flag("--ops", args->ops,
                "Print the ops this build implements, one line per registry entry: domain, op, first and last opset");
  cmd->callback([args, &action] {
    action = [args] {
      if (args->ops) {
        for (const OpEntry& e : default_op_registry().entries())
          fmt::print("{}\t{}\t{}\t{}\n", e.domain.empty() ? "ai.onnx" : e.domain, e.op_type, e.since, e.until);
        return 0;
      }
      if (args->model.empty()) fail("inspect: give a model (1bit inspect model.onnx) or --ops");
      const ModelLocation loc = locate_model(args->model, args->variant);
      if (loc.layout != "file") fmt::print(stderr, "{} ({} layout): {}\n", args->model, loc.layout, loc.model);
      const Graph g = load_onnx(loc.model);
      const Census c = take_census(g);
      fmt::print("{}", args->json ? census_json(c) : census_text(c));
      return 0;
    };
  });
}

}  // namespace onebit::cli
