// Sizes that cannot wrap. Every element count, byte count and shape product
// in the tree goes through these (or through numel / dtype_bytes, which use
// them): a result that does not fit is an Error saying what it was for,
// never a wrapped number. Tensors are capped at kMaxTensorBytes so that the
// sums and roundings done with their sizes afterwards cannot wrap either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

namespace onebit {

inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 48;  // 256 TiB
inline constexpr int64_t kMaxElements = int64_t{1} << 50;

[[noreturn]] void size_overflow(std::string_view what, int64_t a, int64_t b, char op);

// a·b and a+b for non-negative sizes; `what` names the quantity in the error.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > kMaxElements) size_overflow(what, a, b, '*');
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > kMaxElements) size_overflow(what, a, b, '+');
  return r;
}
inline uint64_t checked_mul_u64(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) size_overflow(what, static_cast<int64_t>(a), static_cast<int64_t>(b), '*');
  return r;
}
inline uint64_t checked_add_u64(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) size_overflow(what, static_cast<int64_t>(a), static_cast<int64_t>(b), '+');
  return r;
}

// ceil(a / b) for a >= 0, b > 0, without the a + b - 1 that wraps for a
// block size or step read from a file.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace onebit
