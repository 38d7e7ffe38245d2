// Element types. The numbering is ONNX's TensorProto.DataType, so a dtype read
// from a file needs no table to translate; types 1bit cannot hold are rejected
// by the loader with the number that was found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace onebit {

enum class DType : int32_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  String = 8,  // recognised so errors can name it; never held
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  BF16 = 16,
  U4 = 21,  // two per byte, first element in the low nibble
  I4 = 22,
};

// True for the types a Tensor can hold.
bool dtype_supported(DType t);
bool dtype_supported(int32_t onnx_type);

// Bits per element (4 for the nibble types, 0 for unsupported types).
int dtype_bits(DType t);

// Bytes for `count` elements, rounding nibble types up to whole bytes.
size_t dtype_bytes(DType t, int64_t count);

std::string_view dtype_name(DType t);  // "float32", "int4", ...

bool dtype_is_float(DType t);    // F16, BF16, F32, F64
bool dtype_is_integer(DType t);  // signed or unsigned, any width, not Bool
bool dtype_is_signed(DType t);

// 16-bit float conversions (round to nearest even, NaN preserved).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
// bfloat16 is the top half of a float32; inline, so loops over tensors vectorise.
inline float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

// Storage types for the 16-bit floats, so templates can tell them from uint16_t.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

// The C++ type that stores one element of a (byte-addressable) dtype.
template <DType T> struct StorageOf;
template <> struct StorageOf<DType::F32> { using type = float; };
template <> struct StorageOf<DType::F64> { using type = double; };
template <> struct StorageOf<DType::F16> { using type = Half; };
template <> struct StorageOf<DType::BF16> { using type = BFloat16; };
template <> struct StorageOf<DType::I8> { using type = int8_t; };
template <> struct StorageOf<DType::U8> { using type = uint8_t; };
template <> struct StorageOf<DType::I16> { using type = int16_t; };
template <> struct StorageOf<DType::U16> { using type = uint16_t; };
template <> struct StorageOf<DType::I32> { using type = int32_t; };
template <> struct StorageOf<DType::U32> { using type = uint32_t; };
template <> struct StorageOf<DType::I64> { using type = int64_t; };
template <> struct StorageOf<DType::U64> { using type = uint64_t; };
template <> struct StorageOf<DType::Bool> { using type = bool; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<Half>() { return DType::F16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BF16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::I8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::I16; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::U16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::U32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::U64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

}  // namespace onebit
