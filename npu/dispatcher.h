// The one code path between the integer GEMM kernels and a device, used the
// same way by the XRT device and the reference device, so the tests run
// every line of it:
//
//   bind (at load, once per constant weight): find the design for (K, N),
//     open its hardware context (at most max_contexts of them), write the
//     weight into a B buffer of its own and sync it once;
//   run (per call): at least kDeviceMinRows rows, else the host runs it;
//     rows copied into the design's A buffer and zero-padded up to its M,
//     more rows than M as several launches; only the rows used are synced
//     in and out; the int32 accumulators land in the caller's C, which the
//     caller's host epilogue turns into outputs — the same epilogue the
//     host path runs, so the two can differ only if the accumulator does.
//   Any launch that does not complete (timeout, abort, error, exception)
//     marks its design dead for the session: that GEMM and every later one
//     on the design run on the host, and one line says why.
//
// Trace (--npu-trace), on stderr: one line per GEMM at bind time
//   npu_qdq_bind node='…' k=1024 n=2048 design=16x1024x2048
//   npu_qdq_fallback node='…' k=1024 n=151936 why=no-design
// and one per (route, rows, K, N, outcome) seen at run time
//   npu_qdq_device m=32 k=1024 n=3072 design=16x1024x3072 runs=2
//   npu_qdq_host_rows m=5 k=1024 n=1024 min=16
//   npu_qdq_fallback m=24 k=1024 n=2048 why=dead-design
// Routes: qdq (fused A8W8 groups), qd8 (--int8), q4 (4-bit weights,
// re-quantized to int8 per column for the device).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "npu/device.h"

namespace onebit::npu {

// A GEMM with fewer rows than this runs on the host: one launch costs about
// as much as the host loop for ~16 rows on the devices measured so far
// (docs/npu.md).
inline constexpr size_t kDeviceMinRows = 16;

enum class Route : uint8_t { kQdq, kQd8, kQ4 };
const char* route_name(Route r);  // "qdq", "qd8", "q4"

struct DispatcherOptions {
  int max_contexts = 4;  // hardware contexts opened at most (Phoenix allows 6 per system, Strix 16)
  bool trace = false;
  std::chrono::milliseconds timeout{5000};
  // Where the lines go (trace and the one-time notices); null: stderr.
  std::function<void(const std::string&)> log;
  // Test only: leave out one sync so a test can see the device's output go
  // wrong (never set outside tests).
  bool test_skip_a_sync = false;
  bool test_skip_c_sync = false;
};

struct DispatchCounters {
  int64_t gemms_bound = 0;     // GEMMs offered to the device (bind calls)
  int64_t gemms_routed = 0;    // of those, with a design
  int64_t launches = 0;
  int64_t device_calls = 0;    // GEMM calls that ran on the device
  int64_t host_row_calls = 0;  // calls below kDeviceMinRows
  int64_t fallback_calls = 0;  // calls a dead or failed design sent to the host
  int64_t padded_rows = 0;     // zero rows added to reach the design's M
  uint64_t bytes_to_device = 0;    // A per call, B once per weight
  uint64_t bytes_from_device = 0;  // C per call
  int64_t contexts = 0;
};

class Dispatcher {
 public:
  class Slot;

  // `device` null: every bind falls back with `no_device_why` (an XRT too
  // old, no device found, ...), said once.
  Dispatcher(std::unique_ptr<Device> device, std::vector<Design> designs, DispatcherOptions options,
             std::string no_device_why = "");
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Offers the constant weight `w` ([K, N] row-major int8; 8-bit weights of
  // another type are shifted to int8 by the caller) of node `label` to the
  // device. Returns its slot, or null when it stays on the host (no design
  // for (K, N), no device, the context cap): the caller keeps its host path
  // only. Writes the weight to the device now; `w` is not kept.
  Slot* bind(Route route, const std::string& label, size_t k, size_t n, const int8_t* w);

  // C[m×N] (int32, row stride ldc) = A·W with A[m×K] the bytes at x (row
  // stride lda) XOR `flip` (0x80 turns uint8 into int8 minus 128). True
  // when the device computed C; false when the host must (too few rows, a
  // dead design, this launch failed); C is then unspecified.
  bool run(Slot& slot, size_t m, const void* x, size_t lda, uint8_t flip, int32_t* c, size_t ldc);

  // Whether a call of m rows takes the device's way (at least
  // kDeviceMinRows); when not, it is counted and traced as host rows. run()
  // asks this itself; a caller that must prepare operands first asks before.
  bool routes(Slot& slot, size_t m);

  // The weight a slot holds, as [K, N] int8 (for a host twin built when the
  // design dies).
  std::vector<int8_t> weight_of(const Slot& slot) const;
  bool alive(const Slot& slot) const;

  const DispatchCounters& counters() const { return counters_; }
  const std::string& device_name() const { return device_name_; }
  bool has_device() const { return device_ != nullptr; }
  // "npu: reference device (software, not an NPU): 196 of 197 GEMMs routed, …"
  std::string summary() const;

 private:
  struct Opened;
  Opened* open_for(size_t k, size_t n, std::string& why);
  void note(const std::string& key, const std::string& line);  // once per key
  void say(const std::string& line) const;
  void mark_dead(Opened& o, const std::string& why);

  std::unique_ptr<Device> device_;
  std::vector<Design> designs_;
  DispatcherOptions options_;
  std::string device_name_, no_device_why_;
  std::vector<std::unique_ptr<Opened>> opened_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::map<std::string, int64_t> run_lines_;  // trace key -> launches, for runs=N
  std::set<std::string> said_;                // one-time lines already printed
  DispatchCounters counters_;
};

}  // namespace onebit::npu
