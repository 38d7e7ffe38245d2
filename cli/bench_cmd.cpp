// `1bit bench MODEL --prompt-lengths 16,64,256,1024 --gen 128`: prefill
// tok/s, decode ms/token, the GB/s a decode step achieves reading weights and
// KV cache against the read limit measured in the same run (models/bench.h:
// the kernels' access pattern, and an independent STREAM-like reduce), peak
// RSS and load time.

#include <chrono>
#include <fmt/format.h>
#include <fstream>

#include "base/atomic_file.h"
#include "base/cpu_features.h"
#include "base/error.h"
#include "base/json.h"
#include "base/thread_pool.h"
#include "cli/commands.h"
#include "cli/process_stats.h"
#include "cli/session_flags.h"
#include "models/bench.h"
#include "models/model.h"
#include "npu/dispatcher.h"

namespace onebit::cli {

void add_bench_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("bench", "Prefill and decode speed of a causal LM, against the memory bandwidth");
  cmd->footer("\nExample:\n  1bit bench qwen3-0.6b-cached.onnx --prompt-lengths 16,64,256,1024 --gen 128 --threads 2\n");
  struct Args {
    std::string model, json;
    std::vector<int64_t> lengths{16, 64, 256, 1024};
    int64_t gen = 128;
    bool no_bandwidth = false;
    SessionFlags session;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "ONNX causal LM (a .onnx file or a model folder)")->required();
  cmd->add_option("--prompt-lengths", a->lengths, "Prompt lengths in tokens")->delimiter(',')->capture_default_str();
  cmd->add_option("--gen", a->gen, "New tokens per run (EOS ignored)")->capture_default_str();
  a->session.add_to(cmd);
  cmd->add_flag("--no-bandwidth", a->no_bandwidth, "Skip the memory-bandwidth probe");
  cmd->add_option("--json", a->json, "Also write the results as JSON");
  cmd->callback([a, &action] {
    action = [a] {
      if (a->gen < 1) fail("--gen must be at least 1, got {}", a->gen);
      for (int64_t p : a->lengths)
        if (p < 1) fail("--prompt-lengths: {} is not a positive length", p);
      ModelOptions mo;
      mo.session = a->session.options();
      mo.npu = a->session.dispatcher();
      mo.variant = a->session.variant;
      std::unique_ptr<Model> model = Model::open(a->model, mo);  // as ort-run: last logits row, KV kept
      Session& session = model->session();
      const CausalLmBinding& binding = model->binding();
      const SessionOptions& opts = session.options();
      const double load_s = model->load_seconds();
      const uint64_t weights = weight_bytes_per_pass(session);
      const ReadLimit limit = a->no_bandwidth ? ReadLimit{} : measure_read_limit_isolated(session.pool().size());
      const double bandwidth = limit.limit_gbs();
      const int64_t vocab = model->vocab() > 0 ? model->vocab() : 32000;
      const std::string cache = binding.cache == CausalLmBinding::Cache::None ? "none"
                                : session.keeps_kv_state() ? fmt::format("KV {}", dtype_name(opts.kernel.kv_dtype))
                                                           : "KV";
      const ModelLocation& loc = model->location();
      fmt::print("model {}{}\n  threads {} | cache {} | load {:.2f} s (RSS {:.0f} MiB, peak {:.0f}) | weights read per "
                 "pass {:.1f} MB\n",
                 a->model, loc.layout == "file" ? "" : fmt::format(" ({} layout: {})", loc.layout, loc.model),
                 session.pool().size(), cache, load_s, rss_mib(), peak_rss_mib(), weights / 1e6);
      fmt::print("  cpu {}\n", cpu_summary());
      for (const std::string& note : session.pass_report().notes) fmt::print("  note: {}\n", note);
      if (bandwidth > 0)
        fmt::print("  read limit {:.1f} GB/s: probe {:.1f} ({} streams per thread, {} loads, best of {}), STREAM-like "
                   "reduce {:.1f}\n",
                   bandwidth, limit.probe_gbs, limit.streams, limit.loads, limit.trials, limit.reduce_gbs);
      fmt::print("  {:>6} {:>5} {:>12} {:>12} {:>10} {:>10} {:>8} {:>9}\n", "prompt", "gen", "prefill t/s",
                 "decode ms/t", "decode t/s", "weight GB/s", "KV GB/s", "of limit");
      Generator& gen = model->generator();
      Json json = {{"model", a->model},           {"model_file", loc.model},
                   {"threads", session.pool().size()}, {"load_s", load_s},
                   {"cpu", cpu_summary()},
                   {"kv_dtype", dtype_name(opts.kernel.kv_dtype)},
                   {"weight_bytes", weights},     {"bandwidth_gbs", bandwidth},       {"probe_gbs", limit.probe_gbs},
                   {"reduce_gbs", limit.reduce_gbs}, {"rows", Json::array()}};
      for (size_t i = 0; i < a->lengths.size(); ++i) {
        GenerateOptions go;
        go.max_new_tokens = a->gen;
        // With ONEBIT_PROFILE, the prefill and the decode steps are profiled
        // apart: the first token marks the end of the prefill.
        std::string prefill_profile;
        const auto after_prefill = [&](int32_t) {
          if (!opts.profile || !prefill_profile.empty()) return;
          prefill_profile = session.profile_report();
          session.reset_profile();
        };
        if (opts.profile) session.reset_profile();
        const GenerateResult r = gen.run(synthetic_prompt(a->lengths[i], vocab), go, after_prefill);
        const int64_t steps = r.decode_steps();
        const double ms = steps > 0 ? r.decode_ms / steps : 0;
        const double gbs = ms > 0 ? weights / (ms / 1000.0) / 1e9 : 0;
        // The cache a decode step reads: its mean past over the steps.
        const uint64_t kv = kv_bytes_per_step(binding, a->lengths[i] + (steps + 1) / 2,
                                              session.keeps_kv_state() ? opts.kernel.kv_dtype : DType::Undefined);
        const double kv_gbs = ms > 0 ? kv / (ms / 1000.0) / 1e9 : 0;
        const double pct = bandwidth > 0 ? 100.0 * (gbs + kv_gbs) / bandwidth : 0;
        fmt::print("  {:>6} {:>5} {:>12.1f} {:>12.2f} {:>10.2f} {:>11.1f} {:>8.2f} {:>8.0f}%\n", a->lengths[i],
                   r.tokens.size(), a->lengths[i] / (r.prefill_ms / 1000.0), ms, ms > 0 ? 1000.0 / ms : 0, gbs, kv_gbs,
                   pct);
        std::fflush(stdout);
        if (opts.profile)
          fmt::print(stderr, "prefill of {} tokens, {}decode steps, {}", a->lengths[i], prefill_profile,
                     session.profile_report());
        json["rows"].push_back({{"prompt", a->lengths[i]},
                                {"gen", r.tokens.size()},
                                {"prefill_ms", r.prefill_ms},
                                {"reserve_ms", r.reserve_ms},
                                {"decode_ms_per_token", ms},
                                {"weight_gbs", gbs},
                                {"kv_gbs", kv_gbs},
                                {"limit_pct", pct}});
      }
      fmt::print("  peak RSS {:.0f} MiB\n", peak_rss_mib());
      if (model->npu()) fmt::print("  {}\n", model->npu()->summary());
      json["peak_rss_mib"] = peak_rss_mib();
      if (!a->json.empty()) {
        AtomicFile out(a->json);
        out.out() << json_text(json) << "\n";
        out.commit();
      }
      return 0;
    };
  });
}

}  // namespace onebit::cli
