// .npy files (graph/npy.h): headers, shapes, dtypes, sizes.
#include "graph/npy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  const std::string path = fuzz::write("in.npy", data, size);
  fuzz::expect_clean([&] {
    const Tensor t = read_npy(path);
    // What was read is whole: every byte addressable.
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.bytes(); i += 4096) sink = sink ^ static_cast<const uint8_t*>(t.raw())[i];
    write_npy(fuzz::scratch() + "/out.npy", t);
    (void)sink;
  });
  return 0;
}
