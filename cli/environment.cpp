// The environment, read in one place (cli/session_flags.h).
#include <cstdlib>
#include <map>
#include <string_view>

#include "base/cpu_features.h"
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
  e.trace = env_flag("ONEBIT_TRACE", false);
  e.profile = env_flag("ONEBIT_PROFILE", false);
  e.huge_pages = env_flag("ONEBIT_HUGE_PAGES", false);
  if (const char* isa = std::getenv("ONEBIT_ISA")) e.isa = isa;
  return e;
}

}  // namespace

const Environment& environment() {
  static const Environment e = read_environment();
  return e;
}

void apply_isa_cap() {
  const std::string& name = environment().isa;
  if (name.empty()) return;
  const std::optional<Isa> isa = parse_isa(name);
  if (!isa) fail("ONEBIT_ISA={} is not a kernel family; valid: {}", name, isa_names());
  set_isa_limit(*isa);
}

void SessionFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--threads", threads, "Threads (default: the machine's cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--basic", basic, "Basic rewrites only: constant folding and the QDQ fusion (for parity runs)");
  cmd->add_flag("--int8", int8, "Run float MatMuls with constant weights as dynamic int8 (qd8)");
  std::map<std::string, ActPrecision> acts;
  for (ActPrecision a : kActPrecisions) acts.emplace(act_precision_name(a), a);
  cmd->add_option("--act-precision", act_precision, "Activations of every 4-bit weight GEMM")
      ->transform(CLI::CheckedTransformer(acts, CLI::ignore_case))
      ->default_str("auto");
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
  o.debug_refusals = env.qdq_debug;
  o.profile = env.profile;
  o.kernel.act_precision = act_precision;
  o.kernel.huge_pages = env.huge_pages;
  o.kernel.trace = env.trace;
  return o;
}

}  // namespace onebit::cli
