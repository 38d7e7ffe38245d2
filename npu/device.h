// What the dispatcher needs of an accelerator, and nothing more: open a
// design (one hardware context, its instruction stream loaded), allocate
// buffers sized for that design, map and sync them, run with a timeout.
// Two implementations: XrtDevice (npu/xrt_device.cpp, the only file that
// includes XRT) and ReferenceDevice (npu/reference_device.cpp, pure C++,
// always built). Every failure is a DeviceError carrying the device's own
// words; the dispatcher turns it into a host fallback, never a crash.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "npu/design.h"

namespace onebit::npu {

struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ert_cmd_state's outcomes a launch can end in.
enum class RunState : uint8_t { kCompleted, kTimeout, kAbort, kError };
const char* run_state_name(RunState s);  // "COMPLETED", "TIMEOUT", "ABORT", "ERROR"

enum class BufferRole : uint8_t { kA, kB, kC };

// A buffer in host memory the device can read (A, B) or write (C). The
// device sees what was last synced to it, and the host sees what the device
// wrote only after syncing it back.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* map() = 0;
  virtual size_t bytes() const = 0;
  virtual void sync_to_device(size_t bytes, size_t offset) = 0;
  virtual void sync_from_device(size_t bytes, size_t offset) = 0;
};

// One design opened on the device: C = A·B for the design's M, K, N.
class DeviceDesign {
 public:
  virtual ~DeviceDesign() = default;
  // A: M×K int8; B: K×N (kn) or N×K (nk) int8; C: M×N int32.
  virtual std::unique_ptr<DeviceBuffer> allocate(BufferRole role) = 0;
  // Launches and waits up to `timeout`; a launch that does not complete in
  // time is aborted before this returns.
  virtual RunState run(DeviceBuffer& a, DeviceBuffer& b, DeviceBuffer& c, std::chrono::milliseconds timeout) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // "XRT 2.26, device 0 (...)" or "reference device (software, not an NPU)".
  virtual std::string name() const = 0;
  virtual bool is_reference() const = 0;
  // Opens `d` in a hardware context of its own; throws DeviceError.
  virtual std::unique_ptr<DeviceDesign> open(const Design& d) = 0;
};

// Bytes of each buffer of a design.
size_t buffer_bytes(const Design& d, BufferRole role);

}  // namespace onebit::npu
