#include "ops/register_ops.h"

#include "ops/registry.h"

namespace onebit {

void register_all_ops(OpRegistry& r) {
  register_binary_ops(r);
  register_shape_ops(r);
}

}  // namespace onebit
