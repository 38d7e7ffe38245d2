// The reference device: pure C++, always built, labelled everywhere as
// "reference device (software, not an NPU)". It computes exactly what a
// design computes (exact int32 C = A·B in the design's B layout) and models
// what real hardware would punish, so the dispatcher's handling of them is
// tested without hardware:
//   - buffers are sized for the design's M, K, N, never the call's; a sync
//     past a buffer's end is an error;
//   - the device computes on its own copy of A and B, taken at
//     sync_to_device, not on the host mapping; C reaches the host mapping
//     only through sync_from_device, and a run leaves the host's view of C
//     poisoned with a sentinel until then — so a missing or misordered sync
//     gives sentinel output, never right output;
//   - an empty instruction stream (an .insts file with no words) runs,
//     reports COMPLETED and computes nothing (C stays sentinel);
//   - injectable faults: open fails, a hardware-context limit, a launch
//     ending TIMEOUT / ABORT / ERROR or throwing, a sync throwing;
//   - counters: launches, bytes each way, contexts open.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "npu/device.h"

namespace onebit::npu {

// The 32-bit pattern C holds until the device writes it (and, on the host
// side, until it is synced back).
inline constexpr int32_t kSentinel = 0x7f7f7f7f;

struct ReferenceFaults {
  bool open_fails = false;       // open() throws as if no device answered
  int context_limit = -1;        // opening more contexts than this throws (-1: no limit)
  int64_t fail_launch = -1;      // launch number (0-based, device-wide) that ends in `fail_state` (-1: none)
  RunState fail_state = RunState::kTimeout;
  bool launch_throws = false;    // that launch throws instead of returning a state
  int64_t throw_on_sync = -1;    // sync number (0-based, either direction) that throws (-1: none)
};

struct ReferenceCounters {
  int64_t contexts = 0;
  int64_t launches = 0;
  int64_t computed = 0;          // launches that computed (non-empty instructions)
  uint64_t bytes_to_device = 0;
  uint64_t bytes_from_device = 0;
  int64_t syncs = 0;
};

class ReferenceDevice : public Device {
 public:
  explicit ReferenceDevice(ReferenceFaults faults = {});
  ~ReferenceDevice() override;

  std::string name() const override { return "reference device (software, not an NPU)"; }
  bool is_reference() const override { return true; }
  std::unique_ptr<DeviceDesign> open(const Design& d) override;

  const ReferenceCounters& counters() const { return *counters_; }
  ReferenceFaults& faults() { return *faults_; }

 private:
  std::shared_ptr<ReferenceFaults> faults_;
  std::shared_ptr<ReferenceCounters> counters_;
};

}  // namespace onebit::npu
