// `1bit run MODEL --input NAME=FILE.npy ... --output-dir DIR`: the generic
// entry point. Runs any graph on .npy inputs and writes each output as .npy.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "cli/commands.h"
#include "cli/session_flags.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "graph/npy.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "npu/dispatcher.h"
#include "ops/register_ops.h"

namespace onebit::cli {

void add_run_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "Run any ONNX graph on .npy inputs, write each output as .npy");
  struct Args {
    std::string model;
    std::vector<std::string> inputs;
    std::string output_dir = ".";
    int stop_after_pass = -1;
    bool verbose = false;
    SessionFlags session;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("model", args->model, "ONNX model file")->required();
  cmd->add_option("--input,-i", args->inputs, "NAME=FILE.npy, once per graph input");
  cmd->add_option("--output-dir,-o", args->output_dir, "Directory for OUTPUT_NAME.npy files")->capture_default_str();
  args->session.add_to(cmd);
  cmd->add_option("--stop-after-pass", args->stop_after_pass,
                  "Run only the first N graph passes (0: none), to bisect a rewrite");
  cmd->add_flag("--verbose,-v", args->verbose, "Print the passes and timings");
  cmd->callback([args, &action] {
    action = [args] {
      SessionOptions opts = args->session.options();
      opts.stop_after_pass = args->stop_after_pass;
      std::vector<NamedTensor> inputs;
      for (const std::string& spec : args->inputs) {
        const size_t eq = spec.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
          fail("--input '{}' is not NAME=FILE.npy", spec);
        inputs.push_back({spec.substr(0, eq), read_npy(spec.substr(eq + 1))});
      }
      const std::unique_ptr<npu::Dispatcher> npu = args->session.dispatcher();
      opts.kernel.npu = npu.get();
      Session session(load_onnx(args->model), default_op_registry(), opts);
      if (args->verbose)
        for (const auto& line : session.pass_report().log) fmt::print(stderr, "{}\n", line);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Tensor> outputs = session.run(inputs);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::filesystem::create_directories(args->output_dir);
      const auto names = session.output_names();
      for (size_t i = 0; i < outputs.size(); ++i) {
        std::string file = names[i];
        for (char& c : file)
          if (c == '/' || c == '\\' || c == ':') c = '_';
        const std::string path = (std::filesystem::path(args->output_dir) / (file + ".npy")).string();
        refuse_same_file(path, args->model, "output");
        write_npy(path, outputs[i]);
        if (args->verbose)
          fmt::print(stderr, "{} {} {} -> {}\n", names[i], dtype_name(outputs[i].dtype()),
                     shape_str(outputs[i].shape()), path);
      }
      if (args->verbose) fmt::print(stderr, "run: {:.2f} ms\n", ms);
      if (npu && args->verbose) fmt::print(stderr, "{}\n", npu->summary());
      return 0;
    };
  });
}

}  // namespace onebit::cli
