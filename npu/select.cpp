#include "npu/select.h"

#include "npu/reference_device.h"
#include "npu/xrt_device.h"

namespace onebit::npu {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kOff: return "off";
    case Mode::kAuto: return "auto";
    case Mode::kXrt: return "xrt";
    case Mode::kReference: return "reference";
  }
  return "?";
}

std::optional<Mode> parse_mode(const std::string& name) {
  for (Mode m : {Mode::kOff, Mode::kAuto, Mode::kXrt, Mode::kReference})
    if (name == mode_name(m)) return m;
  return std::nullopt;
}

std::unique_ptr<Dispatcher> select_dispatcher(const SelectOptions& o) {
  switch (o.mode) {
    case Mode::kOff: return nullptr;
    case Mode::kReference:
      return std::make_unique<Dispatcher>(std::make_unique<ReferenceDevice>(), o.designs, o.dispatch);
    case Mode::kAuto: {
      if (o.designs.empty() || !xrt_build().hw_context) return nullptr;
      std::string why;
      std::unique_ptr<Device> d = open_xrt_device(why);
      if (!d) return nullptr;
      return std::make_unique<Dispatcher>(std::move(d), o.designs, o.dispatch);
    }
    case Mode::kXrt: {
      std::string why;
      std::unique_ptr<Device> d = open_xrt_device(why);
      if (!d && why.empty()) why = "no XRT device";
      if (!d && o.designs.empty()) why += " (and no designs: --npu-designs or ONEBIT_NPU_DESIGNS)";
      return std::make_unique<Dispatcher>(std::move(d), o.designs, o.dispatch, why);
    }
  }
  return nullptr;
}

}  // namespace onebit::npu
