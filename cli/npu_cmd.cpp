// `1bit npu info | plan MODEL | check`: what the NPU backend can do here,
// what a model needs of a design table, and whether each design of a table
// computes exactly what the host computes.
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <random>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/session_flags.h"
#include "models/model.h"
#include "models/npu_plan.h"
#include "npu/reference_device.h"
#include "npu/xrt_device.h"

namespace onebit::cli {

namespace {

std::vector<npu::Design> designs_from(const std::string& file) {
  if (!file.empty()) return npu::read_manifest(file);
  if (!environment().npu_designs.empty()) return npu::parse_short_form(environment().npu_designs);
  return {};
}

int info(const std::string& designs_file) {
  const npu::XrtBuild b = npu::xrt_build();
  fmt::print("XRT at build time: {}\n", b.describe());
  std::string why;
  const int count = npu::xrt_device_count(why);
  if (count >= 0) fmt::print("XRT at run time: {} device(s)\n", count);
  else fmt::print("XRT at run time: no devices ({})\n", why);
  std::unique_ptr<npu::Device> xrt = npu::open_xrt_device(why);
  fmt::print("NPU through XRT: {}\n", xrt ? xrt->name() : "unavailable: " + why);
  const std::vector<npu::Design> designs = designs_from(designs_file);
  if (designs.empty()) {
    fmt::print("designs: none (--npu-designs FILE.json or ONEBIT_NPU_DESIGNS)\n");
    return 0;
  }
  npu::ReferenceDevice ref;
  fmt::print("designs ({}):\n", designs_file.empty() ? "ONEBIT_NPU_DESIGNS" : designs_file);
  for (const npu::Design& d : designs) {
    std::string xrt_state = "not tried (no XRT device)", ref_state;
    if (xrt) {
      try {
        xrt->open(d);
        xrt_state = "opens";
      } catch (const std::exception& e) {
        xrt_state = std::string("does not open: ") + e.what();
      }
    }
    try {
      ref.open(d);
      ref_state = "opens";
    } catch (const std::exception& e) {
      ref_state = std::string("does not open: ") + e.what();
    }
    fmt::print("  {:<16} b_layout {}  xclbin {}  insts {}\n    XRT: {}\n    {}: {}\n", d.key(),
               d.b_layout == npu::BLayout::kKN ? "kn" : "nk", d.xclbin.empty() ? "-" : d.xclbin,
               d.insts.empty() ? "-" : d.insts, xrt_state, ref.name(), ref_state);
  }
  return 0;
}

std::string rows_str(int64_t rows) {
  if (rows < 0) return "?";
  if (rows == 0) return "-";
  return rows < static_cast<int64_t>(npu::kDeviceMinRows) ? fmt::format("{} (host)", rows) : fmt::format("{}", rows);
}

int plan(const std::string& model_path, const SessionFlags& flags, const std::string& designs_file, int64_t prompt,
         int64_t design_m, const std::string& target_name) {
  const std::optional<npu::Target> target = npu::parse_target(target_name);
  if (!target) fail("--target: '{}' is not one of npu, npu2", target_name);
  ModelOptions mo;
  mo.session = flags.options();
  mo.variant = flags.variant;
  std::unique_ptr<Model> model = Model::open(model_path, mo);
  const std::vector<NpuGemm> gemms = npu_gemms(*model, prompt);
  const std::vector<npu::Design> designs = designs_from(designs_file);
  auto design_for = [&](int64_t k, int64_t n) -> const npu::Design* {
    for (const npu::Design& d : designs)
      if (d.k == k && d.n == n) return &d;
    return nullptr;
  };
  struct Shape {
    npu::Route route;
    int64_t k, n;
    int64_t count = 0, prefill = 0, decode = 0;
  };
  std::vector<Shape> shapes;
  for (const NpuGemm& g : gemms) {
    auto it = std::find_if(shapes.begin(), shapes.end(), [&](const Shape& s) {
      return s.route == g.route && s.k == g.k && s.n == g.n && s.prefill == g.prefill_rows && s.decode == g.decode_rows;
    });
    if (it == shapes.end()) shapes.push_back({g.route, g.k, g.n, 1, g.prefill_rows, g.decode_rows});
    else ++it->count;
  }
  fmt::print("npu plan: {} | prefill of {} tokens | designs: {} | target {}\n", model_path, prompt,
             designs.empty() ? std::string("none") : (designs_file.empty() ? "ONEBIT_NPU_DESIGNS" : designs_file),
             npu::target_name(*target));
  fmt::print("  {:<5} {:>6} x {:<7} {:>6} {:>13} {:>12}  {}\n", "route", "K", "N", "GEMMs", "prefill rows",
             "decode rows", "design");
  int64_t total = 0, covered = 0;
  std::map<std::pair<int64_t, int64_t>, bool> missing;
  for (const Shape& s : shapes) {
    const npu::Design* d = design_for(s.k, s.n);
    total += s.count;
    if (d) covered += s.count;
    else missing[{s.k, s.n}] = true;
    fmt::print("  {:<5} {:>6} x {:<7} {:>6} {:>13} {:>12}  {}\n", npu::route_name(s.route), s.k, s.n, s.count,
               rows_str(s.prefill), rows_str(s.decode), d ? d->key() : "none");
  }
  fmt::print("coverage: {} of {} fused GEMMs have a design\n", covered, total);
  if (!missing.empty()) {
    fmt::print("missing designs (mlir-aie, --target {}, M = {}):\n", npu::target_name(*target), design_m);
    for (const auto& [kn, unused] : missing) {
      std::string why;
      const auto cmd = npu::mlir_aie_command(design_m, kn.first, kn.second, *target, why);
      if (cmd) fmt::print("  {}x{}x{}: {}\n", design_m, kn.first, kn.second, *cmd);
      else fmt::print("  {}x{}x{}: no design: {}; it stays on the host\n", design_m, kn.first, kn.second, why);
    }
  }
  return 0;
}

int check(const std::string& designs_file, const std::string& mode, int reps) {
  const std::vector<npu::Design> designs = designs_from(designs_file);
  if (designs.empty()) fail("npu check: no designs (--npu-designs FILE.json or ONEBIT_NPU_DESIGNS)");
  std::unique_ptr<npu::Device> device;
  if (mode == "xrt") {
    std::string why;
    device = npu::open_xrt_device(why);
    if (!device) fail("npu check --npu xrt: {}", why);
  } else {
    device = std::make_unique<npu::ReferenceDevice>();
  }
  fmt::print("npu check on the {}{}\n", device->name(),
             device->is_reference() ? ": these numbers are the software model's, not an NPU's" : "");
  int bad = 0;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> dist(-128, 127);
  for (const npu::Design& d : designs) {
    const size_t M = static_cast<size_t>(d.m), K = static_cast<size_t>(d.k), N = static_cast<size_t>(d.n);
    try {
      auto dd = device->open(d);
      auto a = dd->allocate(npu::BufferRole::kA), b = dd->allocate(npu::BufferRole::kB),
           c = dd->allocate(npu::BufferRole::kC);
      std::vector<int8_t> A(M * K), B(K * N);  // B as [K][N]
      for (auto& v : A) v = static_cast<int8_t>(dist(rng));
      for (auto& v : B) v = static_cast<int8_t>(dist(rng));
      std::memcpy(a->map(), A.data(), A.size());
      auto* bm = static_cast<int8_t*>(b->map());
      for (size_t kk = 0; kk < K; ++kk)
        for (size_t j = 0; j < N; ++j)
          bm[d.b_layout == npu::BLayout::kKN ? kk * N + j : j * K + kk] = B[kk * N + j];
      auto* cm = static_cast<int32_t*>(c->map());
      for (size_t i = 0; i < M * N; ++i) cm[i] = npu::kSentinel;
      a->sync_to_device(a->bytes(), 0);
      b->sync_to_device(b->bytes(), 0);
      c->sync_to_device(c->bytes(), 0);  // the sentinel, so a run that writes nothing shows
      double best_us = 1e300;
      npu::RunState st = npu::RunState::kCompleted;
      for (int r = 0; r < reps && st == npu::RunState::kCompleted; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        st = dd->run(*a, *b, *c, std::chrono::milliseconds(5000));
        c->sync_from_device(c->bytes(), 0);
        best_us = std::min(best_us, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      if (st != npu::RunState::kCompleted) {
        fmt::print("  {:<16} FAILED: the launch ended {}\n", d.key(), npu::run_state_name(st));
        ++bad;
        continue;
      }
      size_t wrong = 0, sentinel = 0;
      for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < N; ++j) {
          int32_t want = 0;
          for (size_t kk = 0; kk < K; ++kk) want += int32_t(A[i * K + kk]) * int32_t(B[kk * N + j]);
          wrong += cm[i * N + j] != want;
          sentinel += cm[i * N + j] == npu::kSentinel;
        }
      if (wrong) {
        fmt::print("  {:<16} FAILED: {} of {} int32 outputs differ from the host GEMM ({} still the sentinel)\n",
                   d.key(), wrong, M * N, sentinel);
        ++bad;
      } else {
        fmt::print("  {:<16} exact ({} of {} int32 outputs), {:.1f} us per call (best of {}, with the C sync)\n",
                   d.key(), M * N, M * N, best_us, reps);
      }
    } catch (const std::exception& e) {
      fmt::print("  {:<16} FAILED: {}\n", d.key(), e.what());
      ++bad;
    }
  }
  if (bad) fail("npu check: {} of {} designs failed", bad, designs.size());
  return 0;
}

}  // namespace

void add_npu_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("npu", "The NPU backend: what is available, what a model needs, design checks");
  cmd->require_subcommand(1);
  cmd->footer(
      "\nExamples:\n"
      "  1bit npu info --npu-designs designs.json\n"
      "  1bit npu plan model-qdq.onnx --npu-designs designs.json --target npu2\n"
      "  1bit npu check --npu-designs designs.json --npu xrt\n");
  struct Args {
    std::string designs, model, target = "npu", mode = "reference";
    int64_t prompt = 128, m = 16;
    int reps = 20;
    SessionFlags session;
  };
  auto a = std::make_shared<Args>();

  auto* i = cmd->add_subcommand("info", "XRT at build and run time, devices, and whether each design opens");
  i->add_option("--npu-designs", a->designs, "Design manifest (default: ONEBIT_NPU_DESIGNS)");
  i->callback([a, &action] { action = [a] { return info(a->designs); }; });

  auto* p = cmd->add_subcommand("plan", "Every fused integer GEMM of a model, its rows, and the designs it needs");
  p->add_option("model", a->model, "ONNX causal LM")->required();
  p->add_option("--npu-designs", a->designs, "Design manifest (default: ONEBIT_NPU_DESIGNS)");
  p->add_option("--prompt-len", a->prompt, "Prefill length the rows are counted for")->capture_default_str();
  p->add_option("--design-m", a->m, "M of the designs to build")->capture_default_str();
  p->add_option("--target", a->target, "mlir-aie target of the build commands: npu (Phoenix, Hawk Point) or npu2 "
                                       "(Strix, Krackan)")
      ->check(one_of({"npu", "npu2"}))
      ->capture_default_str();
  p->add_option("--threads", a->session.threads, "Threads");
  p->add_flag("--int8", a->session.int8, "Plan the --int8 (qd8) GEMMs of a float model");
  p->callback([a, &action] {
    action = [a] { return plan(a->model, a->session, a->designs, a->prompt, a->m, a->target); };
  });

  auto* c = cmd->add_subcommand("check", "Each design once: random A and B, exact against the host int32 GEMM");
  c->add_option("--npu-designs", a->designs, "Design manifest (default: ONEBIT_NPU_DESIGNS)");
  c->add_option("--npu", a->mode, "reference (default) or xrt")->check(one_of({"reference", "xrt"}));
  c->add_option("--reps", a->reps, "Launches timed per design")->check(CLI::Range(1, 100000))->capture_default_str();
  c->callback([a, &action] { action = [a] { return check(a->designs, a->mode, a->reps); }; });
}

}  // namespace onebit::cli
