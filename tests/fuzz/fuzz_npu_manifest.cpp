// NPU design tables (npu/design.h): the JSON manifest and the short form.
#include "npu/design.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  const std::string path = fuzz::write("designs.json", data, size);
  fuzz::expect_clean([&] { (void)npu::read_manifest(path); });
  fuzz::expect_clean([&] { (void)npu::parse_short_form(std::string(reinterpret_cast<const char*>(data), size)); });
  fuzz::expect_clean([&] { (void)npu::read_instructions(path); });
  return 0;
}
