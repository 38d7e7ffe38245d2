// Which device a session routes to (`--npu off|auto|xrt|reference`):
//   off        host only (no dispatcher);
//   auto       XRT when this build can drive an NPU, a device answers and
//              designs are given; otherwise off, silently;
//   xrt        XRT; when it cannot be used (built against an XRT older than
//              2.17, no runtime, no device) the session still runs on the
//              host and says so once;
//   reference  the reference device (software, not an NPU), only when asked.
// Never a load failure.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "npu/design.h"
#include "npu/dispatcher.h"

namespace onebit::npu {

enum class Mode : uint8_t { kOff, kAuto, kXrt, kReference };
const char* mode_name(Mode m);  // "off", "auto", "xrt", "reference"
std::optional<Mode> parse_mode(const std::string& name);

struct SelectOptions {
  Mode mode = Mode::kAuto;
  std::vector<Design> designs;
  DispatcherOptions dispatch;
};

// The dispatcher `o` asks for, or null for host only.
std::unique_ptr<Dispatcher> select_dispatcher(const SelectOptions& o);

}  // namespace onebit::npu
