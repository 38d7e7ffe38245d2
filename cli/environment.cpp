// The environment, read in one place (cli/session_flags.h).
#include <cstdlib>
#include <map>
#include <vector>
#include <string_view>

#include "base/cpu_features.h"
#include "base/memory_budget.h"
#include "base/error.h"
#include "cli/session_flags.h"

namespace onebit::cli {

namespace {

bool env_flag(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  const std::string_view s(v);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  fail("{}={} is not a switch: use 1/0, true/false, on/off", name, s);
}

Environment read_environment() {
  Environment e;
  e.qdq = env_flag("ONEBIT_QDQ", true);
  e.qdq_debug = env_flag("ONEBIT_QDQ_DEBUG", false);
  e.q4 = env_flag("ONEBIT_Q4", true);
  e.kv_state = env_flag("ONEBIT_KV_STATE", true);
  e.patch_plans = env_flag("ONEBIT_PLAN_PATCH", true);
  e.regrow_plans = env_flag("ONEBIT_PLAN_REGROW", true);
  e.trace = env_flag("ONEBIT_TRACE", false);
  e.profile = env_flag("ONEBIT_PROFILE", false);
  e.huge_pages = env_flag("ONEBIT_HUGE_PAGES", false);
  if (const char* isa = std::getenv("ONEBIT_ISA")) e.isa = isa;
  if (const char* d = std::getenv("ONEBIT_NPU_DESIGNS")) e.npu_designs = d;
  return e;
}

}  // namespace

const Environment& environment() {
  static const Environment e = read_environment();
  return e;
}

void apply_isa_cap() {
  if (const std::string error = set_isa_limit_named(environment().isa); !error.empty()) fail("{}", error);
}

CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return CLI::Validator(
      [names, list](std::string& v) -> std::string {
        for (const std::string& n : names)
          if (v == n) return {};
        return "'" + v + "' is not one of " + list;
      },
      "{" + list + "}");
}

void add_max_memory(CLI::App* cmd) {
  cmd->add_option_function<std::string>(
         "--max-memory",
         [](const std::string& v) {
           uint64_t bytes = 0;
           if (!parse_bytes(v, bytes) || bytes == 0)
             throw CLI::ValidationError("--max-memory", "'" + v + "' is not a size (e.g. 8G, 512MiB, 1000000)");
           set_memory_limit(bytes);
         },
         "Memory budget for tensors, packed weights and buffers (default: physical memory, " +
             format_bytes(physical_memory_bytes()) + "); a model needing more is an error naming what")
      ->type_name("BYTES");
}

void SessionFlags::add_to(CLI::App* cmd) {
  add_max_memory(cmd);
  cmd->add_option("--variant", variant,
                  "For a model folder with several models: which (fp32 = model.onnx, else the X of model_X.onnx, "
                  "e.g. q4, fp16, int8, quantized)");
  cmd->add_option("--threads", threads, "Threads (default: the machine's cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--basic", basic, "Basic rewrites only: constant folding and the QDQ fusion (for parity runs)");
  cmd->add_flag("--int8", int8, "Run float MatMuls with constant weights as dynamic int8 (qd8)");
  cmd->add_flag("--pack-weights", pack_weights,
                "Copy float32 MatMul weights into packed panels at load instead of reading them where the file "
                "maps them: ~0.4 s per GB more load and a private copy; faster where page-cache reads are slow "
                "and for prompts over 64 tokens");
  std::vector<std::string> acts;
  for (ActPrecision a : kActPrecisions) acts.push_back(act_precision_name(a));
  cmd->add_option("--act-precision", act_precision,
                  "Activations of every 4-bit weight GEMM (auto: int8 per K block; float on a MatMulNBits "
                  "whose accuracy_level is 1, 2 or 3, as onnxruntime computes it)")
      ->check(one_of(acts))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", kv_dtype,
                  "What the KV cache the session keeps stores: auto (the model's own: float16 for a float16 "
                  "model's cache, exactly; float32 otherwise), f32, f16 (half the bytes to read per step at "
                  "long contexts; each position rounded once), or q8 (int8 with a scale per position and head: "
                  "a little over a quarter of the bytes)")
      ->check(one_of({"auto", "f32", "f16", "q8"}))
      ->capture_default_str();
  std::vector<std::string> modes;
  for (npu::Mode m : {npu::Mode::kOff, npu::Mode::kAuto, npu::Mode::kXrt, npu::Mode::kReference})
    modes.push_back(npu::mode_name(m));
  cmd->add_option("--npu", npu,
                  "Integer GEMMs on an AMD NPU: off, auto (XRT when a device and designs are present), xrt, or "
                  "reference (a software model of the device, for tests)")
      ->check(one_of(modes))
      ->capture_default_str();
  cmd->add_option("--npu-designs", npu_designs,
                  "NPU design manifest (JSON: {\"designs\": [{\"m\", \"k\", \"n\", \"xclbin\", \"insts\", ...}]}); "
                  "default: ONEBIT_NPU_DESIGNS (MxKxN=XCLBIN:INSTS,...)");
  cmd->add_flag("--npu-trace", npu_trace, "Log every GEMM's device routing on stderr");
  cmd->add_option("--npu-max-contexts", npu_max_contexts, "NPU hardware contexts to open at most")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

std::unique_ptr<npu::Dispatcher> SessionFlags::dispatcher() const {
  npu::SelectOptions o;
  o.mode = npu::parse_mode(npu).value();  // validated by one_of
  if (o.mode == npu::Mode::kOff) return nullptr;
  if (!npu_designs.empty()) o.designs = npu::read_manifest(npu_designs);
  else if (!environment().npu_designs.empty()) o.designs = npu::parse_short_form(environment().npu_designs);
  o.dispatch.trace = npu_trace;
  o.dispatch.max_contexts = npu_max_contexts;
  return npu::select_dispatcher(o);
}

SessionOptions SessionFlags::options() const {
  const Environment& env = environment();
  SessionOptions o;
  o.threads = threads;
  o.basic = basic;
  o.qd8 = int8;
  o.qdq_fusion = env.qdq;
  o.q4_fusion = env.q4;
  o.kv_state = env.kv_state;
  o.patch_plans = env.patch_plans;
  o.regrow_plans = env.regrow_plans;
  o.debug_refusals = env.qdq_debug;
  o.profile = env.profile;
  o.kernel.act_precision = parse_act_precision(act_precision).value();  // validated by one_of
  o.kernel.kv_dtype = kv_dtype == "f16"   ? DType::F16
                      : kv_dtype == "q8"  ? DType::I8
                      : kv_dtype == "f32" ? DType::F32
                                          : DType::Undefined;  // auto (one_of checked): Session resolves it
  o.kernel.huge_pages = env.huge_pages;
  o.kernel.map_weights = !pack_weights;
  o.kernel.trace = env.trace;
  return o;
}

}  // namespace onebit::cli
