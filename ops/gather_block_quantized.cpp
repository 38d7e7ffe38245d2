// com.microsoft::GatherBlockQuantized — onnxruntime's contrib op, the 4-bit
// embedding lookup of onnxruntime-genai's int4 builds (the table shared
// with the LM head's MatMulNBits weight).
//
// Inputs: 0 data [rows, K'] constant: uint8 holding two 4-bit values a byte
//           (bits 4, first in the low nibble; K = 2·K') or one (bits 8), or
//           int4 / uint4 [rows, K];
//         1 indices int32/int64 [...] (negative counts from the end);
//         2 scales float/float16 [rows, ceil(K / block_size)];
//         3 zero_points (optional): data's type, packed as data, shape of
//           the scales; absent, uint8 and uint4 take 2^(bits−1), int4 0.
// Attributes: gather_axis 0, quantize_axis 1 (the last) — the embedding
//   layout; others are refused by name — block_size (≥ 16, a power of 2),
//   bits 4 or 8.
// Output: scales' type, [indices..., K]; row j = (q − zp) · scale per block.
// Only the gathered rows are dequantized; the table stays packed.
#include <cstring>
#include <optional>

#include "base/thread_pool.h"
#include "graph/op_registry.h"
#include "ops/dispatch.h"

namespace onebit {

namespace {

class GatherBlockQuantizedKernel : public Kernel {
 public:
  explicit GatherBlockQuantizedKernel(const KernelInfo& info) {
    const Attributes& a = info.attrs();
    const int64_t gather_axis = a.get_int("gather_axis", 0), quantize_axis = a.get_int("quantize_axis", 1);
    block_ = a.get_int("block_size", 128);
    bits_ = a.get_int("bits", 4);
    if (bits_ != 4 && bits_ != 8) fail("attribute bits is {}, expected 4 or 8", bits_);
    if (block_ < 16 || (block_ & (block_ - 1)) != 0)
      fail("attribute block_size is {}, expected a power of 2 of at least 16", block_);
    const Tensor* data = info.constant(0);
    if (!data) fail("input data is not a constant; 1bit gathers from a constant quantized table");
    if (data->rank() != 2) fail("input data has shape {}, expected [rows, columns]", shape_str(data->shape()));
    if (gather_axis != 0 && gather_axis != -2)
      fail("attribute gather_axis is {}, expected 0 (rows of the table)", gather_axis);
    if (quantize_axis != 1 && quantize_axis != -1)
      fail("attribute quantize_axis is {}, expected 1 (blocks along each row)", quantize_axis);
    dtype_ = data->dtype();
    rows_ = data->dim(0);
    if (dtype_ == DType::U8) {
      cols_ = bits_ == 4 ? 2 * data->dim(1) : data->dim(1);
    } else if (dtype_ == DType::I4 || dtype_ == DType::U4) {
      if (bits_ != 4) fail("input data is {} but attribute bits is {}", dtype_name(dtype_), bits_);
      cols_ = data->dim(1);
    } else {
      fail("input data is {}, expected uint8, int4 or uint4", dtype_name(dtype_));
    }
    table_ = *data;
    data_ = static_cast<const uint8_t*>(data->raw());
    blocks_ = (cols_ + block_ - 1) / block_;
    const Tensor* scales = info.constant(2);
    if (!scales) fail("input scales is not a constant");
    if (scales->shape() != Shape{rows_, blocks_})
      fail("input scales has shape {}, expected [{}, ceil({} / {}) = {}]", shape_str(scales->shape()), rows_, cols_,
           block_, blocks_);
    if (scales->dtype() != DType::F32 && scales->dtype() != DType::F16)
      fail("input scales is {}, expected float32 or float16", dtype_name(scales->dtype()));
    scales_ = *scales;
    if (info.has_input(3)) {
      if (!info.constant(3)) fail("input zero_points is not a constant");
      zp_ = *info.constant(3);
      if (zp_->dtype() != dtype_) fail("input zero_points is {}, data is {}; they must agree", dtype_name(zp_->dtype()), dtype_name(dtype_));
      const int64_t want = (dtype_ == DType::U8 && bits_ == 8) ? rows_ * blocks_ : rows_ * ((blocks_ + 1) / 2);
      if (static_cast<int64_t>(zp_->bytes()) < want)
        fail("input zero_points holds {} bytes, expected {} for [{}, {}] zero points", zp_->bytes(), want, rows_, blocks_);
    }
    default_zp_ = dtype_ == DType::I4 ? 0 : (1 << (bits_ - 1));
  }

  void reshape(ReshapeContext& ctx) override {
    if (ctx.dtype(1) != DType::I32 && ctx.dtype(1) != DType::I64)
      fail("input indices is {}, expected int32 or int64", dtype_name(ctx.dtype(1)));
    Shape out = ctx.shape(1);
    out.push_back(cols_);
    ctx.set_output(0, scales_.dtype(), out);
  }

  void run(RunContext& ctx) override {
    const Tensor& I = ctx.input(1);
    const int64_t n = I.size();
    Tensor& Y = ctx.output(0);
    const bool i64 = I.dtype() == DType::I64;
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = i64 ? I.data<int64_t>()[i] : I.data<int32_t>()[i];
      if (v < 0) v += rows_;
      if (v < 0 || v >= rows_) fail("index {} is outside the table's {} rows", i64 ? I.data<int64_t>()[i] : I.data<int32_t>()[i], rows_);
      idx[static_cast<size_t>(i)] = v;
    }
    const bool half = scales_.dtype() == DType::F16;
    std::vector<float> row(static_cast<size_t>(cols_));
    for (int64_t i = 0; i < n; ++i) {
      dequantize_row(idx[static_cast<size_t>(i)], row.data());
      if (half) {
        uint16_t* y = Y.data<uint16_t>() + i * cols_;
        for (int64_t c = 0; c < cols_; ++c) y[c] = float_to_half(row[static_cast<size_t>(c)]);
      } else {
        std::memcpy(Y.data<float>() + i * cols_, row.data(), static_cast<size_t>(cols_) * sizeof(float));
      }
    }
  }

  std::string describe() const override {
    return fmt::format("{}-bit table [{}, {}], block {}, dequantized per gathered row", bits_, rows_, cols_, block_);
  }

 private:
  // q at column c of row r, and the zero point of block k of row r.
  int32_t q_at(int64_t r, int64_t c) const {
    if (bits_ == 8) return data_[r * cols_ + c];
    const int64_t e = r * cols_ + c;  // nibble index (rows of an odd K do not share bytes for uint8 data)
    const uint8_t byte = dtype_ == DType::U8 ? data_[r * ((cols_ + 1) / 2) + c / 2] : data_[e / 2];
    const int nib = static_cast<int>((dtype_ == DType::U8 ? c : e) & 1) ? byte >> 4 : byte & 0x0F;
    return dtype_ == DType::I4 ? (nib ^ 8) - 8 : nib;
  }
  int32_t zp_at(int64_t r, int64_t k) const {
    if (!zp_) return default_zp_;
    const uint8_t* z = static_cast<const uint8_t*>(zp_->raw());
    if (dtype_ == DType::U8 && bits_ == 8) return z[r * blocks_ + k];
    const uint8_t byte = z[r * ((blocks_ + 1) / 2) + k / 2];
    const int nib = (k & 1) ? byte >> 4 : byte & 0x0F;
    return dtype_ == DType::I4 ? (nib ^ 8) - 8 : nib;
  }

  void dequantize_row(int64_t r, float* out) const {
    for (int64_t k = 0; k < blocks_; ++k) {
      const float s = scales_.dtype() == DType::F16 ? half_to_float(scales_.data<uint16_t>()[r * blocks_ + k])
                                                     : scales_.data<float>()[r * blocks_ + k];
      const int32_t z = zp_at(r, k);
      const int64_t c1 = std::min(cols_, (k + 1) * block_);
      for (int64_t c = k * block_; c < c1; ++c) out[c] = static_cast<float>(q_at(r, c) - z) * s;
    }
  }

  DType dtype_ = DType::U8;
  int64_t block_ = 128, bits_ = 4, rows_ = 0, cols_ = 0, blocks_ = 0;
  int32_t default_zp_ = 8;
  const uint8_t* data_ = nullptr;
  Tensor table_, scales_;  // views that keep the constants alive
  std::optional<Tensor> zp_;
};

}  // namespace

void register_gather_block_quantized_op(OpRegistry& r) {
  r.add(kMicrosoftDomain, "GatherBlockQuantized", 1, 1, make_factory<GatherBlockQuantizedKernel>());
}

}  // namespace onebit
