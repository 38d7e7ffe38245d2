// Integer arithmetic without undefined behaviour, shared by the kernels that
// compute in a tensor's own integer type.
//
// Add, Sub and Mul wrap as numpy's fixed-width integers do, computed in the
// unsigned type (a signed overflow would be undefined; types narrower than
// int are widened to unsigned int first, so uint16·uint16 cannot overflow a
// promoted signed int). Float types pass through unchanged.
//
// float_to_int<D> is a float -> integer conversion with x86 cvtt semantics
// (what NumPy and ONNX Runtime give on x86): truncation toward zero where the
// value fits, else the "integer indefinite" value. Targets up to 32 bits go
// through int32 (out of range and NaN -> INT32_MIN), uint32 and int64 through
// int64 (-> INT64_MIN), then keep the low bits.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

namespace onebit {

template <class C>
using WrapUnsigned = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

template <class C>
C wrap_add(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = WrapUnsigned<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  } else {
    return x + y;
  }
}

template <class C>
C wrap_sub(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = WrapUnsigned<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(x) - static_cast<U>(y)));
  } else {
    return x - y;
  }
}

template <class C>
C wrap_mul(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = WrapUnsigned<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
  } else {
    return x * y;
  }
}

// x^e in C's wrapping arithmetic, by squaring. A negative exponent gives the
// truncated quotient 1 / x^|e|: 1 for x = 1, ±1 for x = -1, else 0 (x = 0 too,
// which has no value; 0 is what an integer division would not give, but it
// is defined and the spec leaves it open).
template <class C, class E>
C wrap_pow(C x, E e) {
  static_assert(std::is_integral_v<C> && std::is_integral_v<E>);
  if constexpr (std::is_signed_v<E>) {
    if (e < 0) {
      if (x == C(1)) return C(1);
      if constexpr (std::is_signed_v<C>) {
        if (x == C(-1)) return (e % 2 == 0) ? C(1) : C(-1);
      }
      return C(0);
    }
  }
  C result = C(1);
  auto n = static_cast<std::make_unsigned_t<E>>(e);
  while (n != 0) {
    if (n & 1u) result = wrap_mul(result, x);
    x = wrap_mul(x, x);
    n >>= 1;
  }
  return result;
}

inline int32_t cvtt32(double x) {
  if (!(x > -2147483649.0 && x < 2147483648.0)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(x);
}

inline int64_t cvtt64(double x) {
  if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(x);
}

template <class D>
D float_to_int(double x) {
  if constexpr (std::is_same_v<D, uint64_t>) {
    // What compilers emit for double -> uint64 on x86-64.
    if (x >= 9223372036854775808.0) return static_cast<uint64_t>(cvtt64(x - 9223372036854775808.0)) ^ (uint64_t{1} << 63);
    return static_cast<uint64_t>(cvtt64(x));
  } else if constexpr (sizeof(D) == 8 || std::is_same_v<D, uint32_t>) {
    return static_cast<D>(cvtt64(x));
  } else {
    return static_cast<D>(cvtt32(x));
  }
}

}  // namespace onebit
