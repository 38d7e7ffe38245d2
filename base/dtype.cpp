#include "base/dtype.h"

#include "base/error.h"
#include "base/sizes.h"

#include <cstring>

namespace onebit {

bool dtype_supported(DType t) { return dtype_bits(t) != 0; }

bool dtype_supported(int32_t onnx_type) {
  return onnx_type >= 0 && onnx_type <= 64 && dtype_supported(static_cast<DType>(onnx_type));
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
    case DType::U64: return 64;
    case DType::F32:
    case DType::I32:
    case DType::U32: return 32;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
    case DType::U16: return 16;
    case DType::I8:
    case DType::U8:
    case DType::Bool: return 8;
    case DType::I4:
    case DType::U4: return 4;
    case DType::Undefined:
    case DType::String: return 0;
  }
  return 0;
}

size_t dtype_bytes(DType t, int64_t count) {
  const int bits = dtype_bits(t);
  if (count < 0) fail("{} elements of {}: a negative count", count, dtype_name(t));
  if (bits == 4) return static_cast<size_t>(count / 2 + count % 2);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(bits / 8), &bytes) ||
      bytes > kMaxTensorBytes)
    fail("{} elements of {} are more than 2^48 bytes", count, dtype_name(t));
  return static_cast<size_t>(bytes);
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Undefined: return "undefined";
    case DType::F32: return "float32";
    case DType::U8: return "uint8";
    case DType::I8: return "int8";
    case DType::U16: return "uint16";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::String: return "string";
    case DType::Bool: return "bool";
    case DType::F16: return "float16";
    case DType::F64: return "float64";
    case DType::U32: return "uint32";
    case DType::U64: return "uint64";
    case DType::BF16: return "bfloat16";
    case DType::U4: return "uint4";
    case DType::I4: return "int4";
  }
  return "unknown";
}

bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::U8:
    case DType::I8:
    case DType::U16:
    case DType::I16:
    case DType::I32:
    case DType::I64:
    case DType::U32:
    case DType::U64:
    case DType::U4:
    case DType::I4: return true;
    default: return false;
  }
}

bool dtype_is_signed(DType t) {
  switch (t) {
    case DType::I8:
    case DType::I16:
    case DType::I32:
    case DType::I64:
    case DType::I4:
    case DType::F16:
    case DType::BF16:
    case DType::F32:
    case DType::F64: return true;
    default: return false;
  }
}

// IEEE 754 binary16 <-> binary32, bit-exact, round to nearest even.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    const uint16_t nan_bit = abs > 0x7f800000u ? static_cast<uint16_t>(0x200u | ((abs >> 13) & 0x3ffu)) : 0;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bit);
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                                // subnormal or zero
    if (abs < 0x33000000u) return sign;                                   // below half the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

}  // namespace onebit
