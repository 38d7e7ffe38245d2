// The XRT device: mlir-aie's host sequence for an xclbin + instruction
// stream GEMM design (docs/npu.md), behind the Device interface. This
// header has no XRT types; npu/xrt_device.cpp is the only file in the tree
// that includes XRT.
#pragma once

#include <memory>
#include <string>

#include "npu/device.h"

namespace onebit::npu {

// The XRT this binary was built against.
struct XrtBuild {
  bool compiled = false;    // built with XRT at all
  int major = 0, minor = 0;
  bool hw_context = false;  // >= 2.17 with xrt_hw_context.h: can drive an NPU
  std::string describe() const;  // "XRT 2.13 (cannot drive an NPU: needs >= 2.17)"
};
XrtBuild xrt_build();

// Device 0 through XRT, or null with `why` set: built without XRT, built
// against an XRT older than 2.17, no XRT runtime or device found.
std::unique_ptr<Device> open_xrt_device(std::string& why);

// Devices XRT enumerates at run time, or -1 with `why` set.
int xrt_device_count(std::string& why);

}  // namespace onebit::npu
