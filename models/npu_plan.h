// `1bit npu plan`: every integer GEMM a model runs after fusion (QDQ groups,
// --int8 GEMMs, 4-bit GEMMs), its (K, N), and its rows in a prefill of
// `prompt` tokens and in a decode step — what a design table has to cover
// and which calls would reach the device (at least npu::kDeviceMinRows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "npu/dispatcher.h"

namespace onebit {

struct NpuGemm {
  npu::Route route;
  std::string node;
  int64_t k = 0, n = 0;
  int64_t prefill_rows = 0;  // -1: not known before run time
  int64_t decode_rows = 0;   // -1: not known; 0: the model has no decode step (no cache)
};

std::vector<NpuGemm> npu_gemms(Model& model, int64_t prompt_tokens);

}  // namespace onebit
