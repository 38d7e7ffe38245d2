// Dtype dispatch for kernels: an explicit switch from DType to a C++ storage
// type, and the arithmetic type each storage type computes in (16-bit floats
// compute in float). The default case names the dtype; the session prefixes
// the node.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/dtype.h"
#include "base/error.h"

namespace onebit {

template <class T> struct Tag { using type = T; };

// Storage type -> compute type, with load/store.
template <class T> struct Arith {
  using C = T;
  static C load(T v) { return v; }
  static T store(C v) { return v; }
};
template <> struct Arith<Half> {
  using C = float;
  static float load(Half v) { return half_to_float(v.bits); }
  static Half store(float v) { return Half{float_to_half(v)}; }
};
template <> struct Arith<BFloat16> {
  using C = float;
  static float load(BFloat16 v) { return bfloat16_to_float(v.bits); }
  static BFloat16 store(float v) { return BFloat16{float_to_bfloat16(v)}; }
};

template <class T> constexpr bool is_float_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

[[noreturn]] inline void unsupported_dtype(std::string_view what, DType t) {
  fail("{} does not support {}", what, dtype_name(t));
}

// Floats (f16, bf16, f32, f64).
template <class F> decltype(auto) dispatch_float(DType t, std::string_view what, F&& f) {
  switch (t) {
    case DType::F32: return f(Tag<float>{});
    case DType::F64: return f(Tag<double>{});
    case DType::F16: return f(Tag<Half>{});
    case DType::BF16: return f(Tag<BFloat16>{});
    default: unsupported_dtype(what, t);
  }
}

// Floats and the byte-addressable integers (no bool, no 4-bit).
template <class F> decltype(auto) dispatch_numeric(DType t, std::string_view what, F&& f) {
  switch (t) {
    case DType::F32: return f(Tag<float>{});
    case DType::F64: return f(Tag<double>{});
    case DType::F16: return f(Tag<Half>{});
    case DType::BF16: return f(Tag<BFloat16>{});
    case DType::I8: return f(Tag<int8_t>{});
    case DType::U8: return f(Tag<uint8_t>{});
    case DType::I16: return f(Tag<int16_t>{});
    case DType::U16: return f(Tag<uint16_t>{});
    case DType::I32: return f(Tag<int32_t>{});
    case DType::U32: return f(Tag<uint32_t>{});
    case DType::I64: return f(Tag<int64_t>{});
    case DType::U64: return f(Tag<uint64_t>{});
    default: unsupported_dtype(what, t);
  }
}

// The byte-addressable integers.
template <class F> decltype(auto) dispatch_integer(DType t, std::string_view what, F&& f) {
  switch (t) {
    case DType::I8: return f(Tag<int8_t>{});
    case DType::U8: return f(Tag<uint8_t>{});
    case DType::I16: return f(Tag<int16_t>{});
    case DType::U16: return f(Tag<uint16_t>{});
    case DType::I32: return f(Tag<int32_t>{});
    case DType::U32: return f(Tag<uint32_t>{});
    case DType::I64: return f(Tag<int64_t>{});
    case DType::U64: return f(Tag<uint64_t>{});
    default: unsupported_dtype(what, t);
  }
}

// Everything byte-addressable, bool included: for ops that only move data.
template <class F> decltype(auto) dispatch_any(DType t, std::string_view what, F&& f) {
  if (t == DType::Bool) return f(Tag<bool>{});
  return dispatch_numeric(t, what, std::forward<F>(f));
}

// Ops that only move bytes dispatch on element width instead of type.
template <class F> decltype(auto) dispatch_width(DType t, std::string_view what, F&& f) {
  switch (dtype_bits(t)) {
    case 8: return f(Tag<uint8_t>{});
    case 16: return f(Tag<uint16_t>{});
    case 32: return f(Tag<uint32_t>{});
    case 64: return f(Tag<uint64_t>{});
    default: unsupported_dtype(what, t);
  }
}

}  // namespace onebit
