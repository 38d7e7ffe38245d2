// The only file that includes XRT. Everything but opening a hardware context
// compiles against Debian's XRT 2.13 too (so CI type-checks it); context
// creation (register_xclbin + hw_context + kernel(ctx, name)) needs XRT
// >= 2.17 and is guarded by ONEBIT_XRT_HWCTX. A test compiles this file
// with -fsyntax-only against XRT 2.26's headers (tests/CMakeLists.txt).
//
// The sequence (mlir-aie programming_examples/basic/matrix_multiplication
// test.cpp and runtime_lib/test_lib): read the instruction words;
// xrt::device(0); xrt::xclbin(path), the kernel whose name starts with the
// design's `kernel`; device.register_xclbin (never load_xclbin, which the
// NPU shim refuses); xrt::hw_context(device, uuid); xrt::kernel(ctx, name);
// the instruction BO (cacheable) at group_id(1), A/B/C host-only at
// group_id(3/4/5) (designs declaring 8 arguments also get a 1-byte tmp and a
// 4-byte trace BO at 6 and 7); sync instructions once; per launch
// kernel(3, instr, words, a, b, c[, tmp, trace]) and wait(timeout): a
// TIMEOUT does not abort by itself, so abort() it.
#include "npu/xrt_device.h"

#include <fmt/format.h>

#include <cstring>

#if defined(ONEBIT_HAVE_XRT)
#include <xrt/xrt_bo.h>
#include <xrt/xrt_device.h>
#include <xrt/xrt_kernel.h>
#if __has_include(<xrt/experimental/xrt_system.h>)
#include <xrt/experimental/xrt_system.h>
#include <xrt/experimental/xrt_xclbin.h>
#else
#include <experimental/xrt_system.h>
#include <experimental/xrt_xclbin.h>
#endif
#if defined(XRT_VERSION_CODE) && XRT_VERSION_CODE >= XRT_VERSION(2, 17) && __has_include(<xrt/xrt_hw_context.h>)
#include <xrt/xrt_hw_context.h>
#define ONEBIT_XRT_HWCTX 1
#endif
#endif

namespace onebit::npu {

std::string XrtBuild::describe() const {
  if (!compiled) return "built without XRT";
  if (!hw_context)
    return fmt::format("XRT {}.{} cannot drive an NPU (needs >= 2.17: register_xclbin and hw_context)", major, minor);
  return fmt::format("XRT {}.{}", major, minor);
}

#if defined(ONEBIT_HAVE_XRT)

XrtBuild xrt_build() {
  XrtBuild b;
  b.compiled = true;
  b.major = XRT_VERSION_CODE >> 16;
  b.minor = XRT_VERSION_CODE & 0xffff;
#if defined(ONEBIT_XRT_HWCTX)
  b.hw_context = true;
#endif
  return b;
}

int xrt_device_count(std::string& why) {
  try {
    return static_cast<int>(xrt::system::enumerate_devices());
  } catch (const std::exception& e) {
    why = e.what();
    return -1;
  }
}

namespace {

class XrtBuffer : public DeviceBuffer {
 public:
  XrtBuffer(xrt::bo bo, size_t bytes) : bo_(std::move(bo)), bytes_(bytes) {}
  void* map() override { return bo_.map<void*>(); }
  size_t bytes() const override { return bytes_; }
  void sync_to_device(size_t bytes, size_t offset) override { bo_.sync(XCL_BO_SYNC_BO_TO_DEVICE, bytes, offset); }
  void sync_from_device(size_t bytes, size_t offset) override { bo_.sync(XCL_BO_SYNC_BO_FROM_DEVICE, bytes, offset); }
  xrt::bo& bo() { return bo_; }

 private:
  xrt::bo bo_;
  size_t bytes_;
};

XrtBuffer& as_xrt(DeviceBuffer& b) {
  auto* x = dynamic_cast<XrtBuffer*>(&b);
  if (!x) throw DeviceError("XRT device: a buffer from another device");
  return *x;
}

RunState state_of(ert_cmd_state s) {
  switch (s) {
    case ERT_CMD_STATE_COMPLETED: return RunState::kCompleted;
    case ERT_CMD_STATE_TIMEOUT: return RunState::kTimeout;
    case ERT_CMD_STATE_ABORT: return RunState::kAbort;
    default: return RunState::kError;
  }
}

class XrtDesign : public DeviceDesign {
 public:
  XrtDesign(xrt::device device, const Design& d) : device_(std::move(device)), d_(d) {
    const std::vector<uint32_t> words = read_instructions(d.insts);
    // An empty stream completes and computes nothing: refuse it here.
    if (words.empty()) throw DeviceError(d.insts + ": the instruction stream is empty");
    xrt::xclbin xclbin(d.xclbin);
    std::string name;
    int args = -1;
    for (const auto& k : xclbin.get_kernels())
      if (k.get_name().rfind(d.kernel, 0) == 0) {
        name = k.get_name();
        args = static_cast<int>(k.get_num_args());
        break;
      }
    if (name.empty()) throw DeviceError(d.xclbin + ": no kernel whose name starts with '" + d.kernel + "'");
    if (args != 6 && args != 8)
      throw DeviceError(fmt::format("{}: kernel '{}' takes {} arguments, expected 6 or 8 (opcode, instructions, "
                                    "count, A, B, C[, tmp, trace])",
                                    d.xclbin, name, args));
    args_ = args;
#if defined(ONEBIT_XRT_HWCTX)
    device_.register_xclbin(xclbin);
    context_ = xrt::hw_context(device_, xclbin.get_uuid());
    kernel_ = xrt::kernel(context_, name);
#else
    throw DeviceError(xrt_build().describe());
#endif
    words_ = words.size();
    instr_ = xrt::bo(device_, words.size() * sizeof(uint32_t), XCL_BO_FLAGS_CACHEABLE, kernel_.group_id(1));
    std::memcpy(instr_.map<void*>(), words.data(), words.size() * sizeof(uint32_t));
    instr_.sync(XCL_BO_SYNC_BO_TO_DEVICE);
    if (args_ == 8) {
      tmp_ = xrt::bo(device_, 1, XRT_BO_FLAGS_HOST_ONLY, kernel_.group_id(6));
      trace_ = xrt::bo(device_, 4, XRT_BO_FLAGS_HOST_ONLY, kernel_.group_id(7));
    }
  }

  std::unique_ptr<DeviceBuffer> allocate(BufferRole role) override {
    const int group = role == BufferRole::kA ? 3 : role == BufferRole::kB ? 4 : 5;
    const size_t bytes = buffer_bytes(d_, role);
    return std::make_unique<XrtBuffer>(xrt::bo(device_, bytes, XRT_BO_FLAGS_HOST_ONLY, kernel_.group_id(group)), bytes);
  }

  RunState run(DeviceBuffer& a, DeviceBuffer& b, DeviceBuffer& c, std::chrono::milliseconds timeout) override {
    const unsigned opcode = 3;
    xrt::run r = args_ == 8 ? kernel_(opcode, instr_, static_cast<unsigned>(words_), as_xrt(a).bo(), as_xrt(b).bo(),
                                      as_xrt(c).bo(), tmp_, trace_)
                            : kernel_(opcode, instr_, static_cast<unsigned>(words_), as_xrt(a).bo(), as_xrt(b).bo(),
                                      as_xrt(c).bo());
    const ert_cmd_state s = r.wait(timeout);
    if (s == ERT_CMD_STATE_TIMEOUT) r.abort();
    return state_of(s);
  }

 private:
  xrt::device device_;
  Design d_;
#if defined(ONEBIT_XRT_HWCTX)
  xrt::hw_context context_;
#endif
  xrt::kernel kernel_;
  xrt::bo instr_, tmp_, trace_;
  size_t words_ = 0;
  int args_ = 6;
};

class XrtDevice : public Device {
 public:
  explicit XrtDevice(xrt::device d) : device_(std::move(d)) {}
  std::string name() const override { return xrt_build().describe() + ", device 0"; }
  bool is_reference() const override { return false; }
  std::unique_ptr<DeviceDesign> open(const Design& d) override {
    if (d.xclbin.empty() || d.insts.empty())
      throw DeviceError(d.source + ": the XRT device needs both an xclbin and an instruction stream");
    try {
      return std::make_unique<XrtDesign>(device_, d);
    } catch (const DeviceError&) {
      throw;
    } catch (const std::exception& e) {
      throw DeviceError(e.what());  // XRT throws std::runtime_error and friends
    }
  }

 private:
  xrt::device device_;
};

}  // namespace

std::unique_ptr<Device> open_xrt_device(std::string& why) {
  const XrtBuild b = xrt_build();
  if (!b.hw_context) {
    why = b.describe();
    return nullptr;
  }
  try {
    return std::make_unique<XrtDevice>(xrt::device(0u));
  } catch (const std::exception& e) {
    why = fmt::format("{}: no device: {}", b.describe(), e.what());
    return nullptr;
  }
}

#else  // built without XRT

XrtBuild xrt_build() { return {}; }

int xrt_device_count(std::string& why) {
  why = "built without XRT";
  return -1;
}

std::unique_ptr<Device> open_xrt_device(std::string& why) {
  why = "built without XRT";
  return nullptr;
}

#endif

}  // namespace onebit::npu
