// Any bytes as an ONNX model: the loader, validation, every pass, planning,
// plan-time folding and one run on small inputs (graph/, ops/).
#include "tests/fuzz/fuzz_graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  fuzz::expect_clean([&] { fuzz::run_graph(load_onnx_bytes(data, size, "fuzz.onnx", fuzz::scratch()), size % 2); });
  return 0;
}
