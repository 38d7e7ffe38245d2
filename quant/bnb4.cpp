#include "quant/bnb4.h"

#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "base/sizes.h"

namespace onebit {

namespace {

// bitsandbytes' tables, as onnxruntime's dequantization reads them (each
// checked against onnxruntime's MatMulBnb4 output at absmax 1).
constexpr float kFP4[16] = {0.0f,  0.0052083333f,  0.6666667f,  1.0f,  0.33333334f,  0.5f,  0.16666667f,  0.25f,
                            -0.0f, -0.0052083333f, -0.6666667f, -1.0f, -0.33333334f, -0.5f, -0.16666667f, -0.25f};
constexpr float kNF4[16] = {-1.0f,
                            -0.6961928009986877f,
                            -0.5250730514526367f,
                            -0.39491748809814453f,
                            -0.28444138169288635f,
                            -0.18477343022823334f,
                            -0.09105003625154495f,
                            0.0f,
                            0.07958029955625534f,
                            0.16093020141124725f,
                            0.24611230194568634f,
                            0.33791524171829224f,
                            0.44070982933044434f,
                            0.5626170039176941f,
                            0.7229568362236023f,
                            1.0f};

}  // namespace

const float* bnb4_table(Bnb4Type type) { return type == Bnb4Type::kFP4 ? kFP4 : kNF4; }

std::vector<float> bnb4_dequantize_transposed(const Bnb4Weight& w) {
  if (w.k == 0 || w.n == 0 || w.block_size == 0)
    fail("MatMulBnb4: K = {}, N = {}, block_size = {}, expected all positive", w.k, w.n, w.block_size);
  const size_t total = static_cast<size_t>(checked_mul(w.n, w.k, "N·K"));
  const float* lut = bnb4_table(w.type);
  std::vector<float> out(total);
  const size_t blocks = (total + w.block_size - 1) / w.block_size;
  for (size_t blk = 0; blk < blocks; ++blk) {
    const float a = w.absmax_f16 ? half_to_float(static_cast<const uint16_t*>(w.absmax)[blk])
                                 : static_cast<const float*>(w.absmax)[blk];
    if (!std::isfinite(a)) fail("MatMulBnb4: absmax[{}] = {}, expected finite", blk, a);
    const size_t end = std::min(total, (blk + 1) * w.block_size);
    for (size_t i = blk * w.block_size; i < end; ++i) {
      const uint8_t byte = w.b[i / 2];
      out[i] = lut[i % 2 ? byte & 15 : byte >> 4] * a;
    }
  }
  return out;
}

}  // namespace onebit
