#include "base/sizes.h"

#include "base/error.h"

namespace onebit {

void size_overflow(std::string_view what, int64_t a, int64_t b, char op) {
  if (a < 0 || b < 0) fail("{}: negative size in {} {} {}", what, a, op, b);
  fail("{}: {} {} {} is too large (the limit is 2^50 elements, 2^48 bytes)", what, a, op, b);
}

}  // namespace onebit
