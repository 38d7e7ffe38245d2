// `1bit pack MODEL -o OUT`: float MatMul weights to 4-bit blocks (Q4NX) in a
// plain opset-21 graph (graph/onnx_pack.h), with a progress bar on stderr
// and the census before and after.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/session_flags.h"
#include "graph/census.h"
#include "base/error.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/onnx/onnx_pack.h"
#include "base/thread_pool.h"

namespace onebit::cli {

namespace {

// "[#########...........]  12/197 weights   340/2400 MB  model.layers.3.mlp.up_proj.weight_T"
// redrawn in place on a terminal; elsewhere one line per tenth of the bytes.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), tty_(::isatty(2) != 0) {}
  void operator()(const PackProgress& p) {
    if (!enabled_ || p.bytes_total == 0) return;
    const double frac = double(p.bytes_done) / double(p.bytes_total);
    const int tenth = static_cast<int>(frac * 10);
    if (!tty_ && tenth == last_tenth_ && p.weights_done != p.weights_total) return;
    last_tenth_ = tenth;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    const std::string line = fmt::format("[{}] {:>4}/{} weights {:>6.0f}/{:.0f} MB", bar, p.weights_done,
                                         p.weights_total, p.bytes_done / 1e6, p.bytes_total / 1e6);
    if (tty_) fmt::print(stderr, "\r{}\x1b[K", line);
    else fmt::print(stderr, "{}\n", line);
    if (tty_ && p.weights_done == p.weights_total) fmt::print(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool enabled_, tty_;
  int last_tenth_ = -1;
};

}  // namespace

void add_pack_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("pack", "Rewrite float MatMul weights as 4-bit blocks (Q4NX, plain opset-21 ONNX)");
  cmd->footer(
      "\nExamples:\n"
      "  1bit pack model.onnx -o model-q4.onnx             # int4, block 32 along K, float32 scales of float16 values\n"
      "  1bit pack model.onnx -o model-q4.onnx --per-channel --exclude 'lm_head*'\n"
      "  1bit pack model.onnx -o model-q4.onnx --block 128 --unsigned --scale-type float16 --clip-search\n"
      "\nRounding: per block, scale = |m|/8 if the largest-magnitude weight m is negative, else |m|/7\n"
      "(rounded to a float16 value unless --full-scales);\n"
      "q = clamp(round_half_to_even(w / scale), -8, 7). --clip-search picks, per block, the scale of\n"
      "least squared error among |m|*a/d (d in 7, 8; a from 1 down to 0.76).\n");
  struct Args {
    std::string model, out, scale_type = "float32", external = "auto";
    int64_t block = 32;
    bool per_channel = false, is_unsigned = false, clip_search = false, quiet = false, no_census = false,
         full_scales = false;
    std::vector<std::string> exclude;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "Float ONNX model")->required();
  cmd->add_option("-o,--output", a->out, "Output .onnx (external data goes to OUT.data beside it)")->required();
  cmd->add_option("--block", a->block, "Block size along K: a power of two of at least 16")->capture_default_str();
  cmd->add_flag("--per-channel", a->per_channel, "One scale per output channel instead of blocks");
  cmd->add_flag("--unsigned", a->is_unsigned, "uint4 codes with zero point 8 instead of int4");
  cmd->add_option("--scale-type", a->scale_type, "float32 or float16 (float16 adds a Cast after each DequantizeLinear)")
      ->capture_default_str();
  cmd->add_option("--exclude", a->exclude,
                  "Keep this weight float: an initializer, value or MatMul node name ('*' and '?' glob); repeatable");
  cmd->add_flag("--clip-search", a->clip_search, "Per block, the clipped scale of least squared error");
  cmd->add_flag("--full-scales", a->full_scales,
                "float32 scales keep their full value; by default each is rounded to a float16 value, which "
                "the AVX-512 VNNI kernels then keep as float16 (~10 % fewer bytes a decode step)");
  add_max_memory(cmd);
  cmd->add_option("--external-data", a->external,
                  "auto (if the source has external data or the result passes 1.8 GB), always or never")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads (default: the machine's cores)");
  cmd->add_flag("--quiet,-q", a->quiet, "No progress bar, no census");
  cmd->add_flag("--no-census", a->no_census, "Skip the census before and after");
  cmd->callback([a, &action] {
    action = [a] {
      PackOptions opt;
      if (a->per_channel) opt.quant.block_size = 0;
      else if (a->block < 16 || (a->block & (a->block - 1)))
        fail("--block {}: expected a power of two of at least 16 (16, 32, 64, 128, 256, ...)", a->block);
      else opt.quant.block_size = static_cast<size_t>(a->block);
      opt.quant.is_signed = !a->is_unsigned;
      if (a->scale_type != "float32" && a->scale_type != "float16")
        fail("--scale-type '{}': expected float32 or float16", a->scale_type);
      opt.quant.float16_scales = a->scale_type == "float16";
      opt.quant.clip_search = a->clip_search;
      opt.quant.half_values = !a->full_scales;
      if (a->external == "auto") opt.external = PackOptions::External::kAuto;
      else if (a->external == "always") opt.external = PackOptions::External::kAlways;
      else if (a->external == "never") opt.external = PackOptions::External::kNever;
      else fail("--external-data '{}': expected auto, always or never", a->external);
      opt.exclude = a->exclude;
      ThreadPool pool(a->threads > 0 ? a->threads : ThreadPool::default_threads());
      opt.pool = &pool;
      ProgressBar bar(!a->quiet);
      opt.progress = [&bar](const PackProgress& p) { bar(p); };
      const bool census = !a->quiet && !a->no_census;

      if (census) fmt::print("census of {}\n{}\n", a->model, census_text(take_census(load_onnx(a->model))));
      std::fflush(stdout);  // before the progress bar on stderr
      const auto t0 = std::chrono::steady_clock::now();
      const PackResult r = pack_onnx(a->model, a->out, opt);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

      fmt::print("packed {} of {} MatMuls ({} weights) in {:.1f} s: {:.1f} MB float -> {:.1f} MB 4-bit ({:.2f} "
                 "bits/weight)\n",
                 r.packed_matmuls, r.matmuls, r.packed_weights, secs, r.float_bytes / 1e6, r.packed_bytes / 1e6,
                 r.float_bytes ? 32.0 * double(r.packed_bytes) / double(r.float_bytes) : 0.0);
      if (r.sum_sq > 0)
        fmt::print("  weight error: rms {:.4f} of the weights' rms, max |w - dequant(w)| {:.4g}\n",
                   std::sqrt(r.sum_sq_error / r.sum_sq), r.max_abs_error);
      for (const auto& [why, count] : r.not_packed) fmt::print("  not packed: {} x{}\n", why, count);
      for (const auto& name : r.excluded) fmt::print("  excluded: {}\n", name);
      if (r.opset_raised) fmt::print("  ai.onnx opset raised to 21 (int4 DequantizeLinear)\n");
      fmt::print("wrote {}{}\n", a->out, r.external ? fmt::format(" + {}", r.external_path) : "");
      if (census) fmt::print("\ncensus of {}\n{}", a->out, census_text(take_census(load_onnx(a->out))));
      return 0;
    };
  });
}

}  // namespace onebit::cli
