#include "graph/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/memory_budget.h"
#include "base/sizes.h"

namespace onebit {

int64_t checked_numel(const Shape& shape) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) zero = true;
    else if (!zero && __builtin_mul_overflow(n, d, &n)) return -1;
    if (!zero && n > kMaxElements) return -1;
  }
  return zero ? 0 : n;
}

int64_t numel(const Shape& shape) {
  const int64_t n = checked_numel(shape);
  if (n < 0) {
    for (int64_t d : shape)
      if (d < 0) fail("shape {} has a negative dim", shape_str(shape));
    fail("shape {} has more than 2^50 elements", shape_str(shape));
  }
  return n;
}

void fail_invalid_shape(const int64_t* dims, size_t rank) {
  const Shape shape(dims, dims + rank);
  numel(shape);  // names a negative dim or the element limit
  fail("shape {} is not a valid shape", shape_str(shape));
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::allocate_uninit(DType dtype, Shape shape) {
  const size_t bytes = dtype_bytes(dtype, numel(shape));
  std::shared_ptr<void> storage;
  try {
    storage = budgeted_shared(bytes, 64, "");
  } catch (const Error& e) {
    // Named only when it fails: allocations happen per run.
    fail("a {} {} tensor: {}", dtype_name(dtype), shape_str(shape), e.what());
  }
  void* p = storage.get();
  return Tensor(dtype, std::move(shape), p, std::move(storage));
}

Tensor Tensor::allocate(DType dtype, Shape shape) {
  Tensor t = allocate_uninit(dtype, std::move(shape));
  std::memset(t.raw(), 0, t.bytes());
  return t;
}

Tensor Tensor::clone(const Tensor& src) {
  Tensor t = allocate(src.dtype(), src.shape());
  if (src.bytes()) std::memcpy(t.raw(), src.raw(), src.bytes());
  return t;
}

int64_t tensor_int_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::I64: return t.data<int64_t>()[i];
    case DType::I32: return t.data<int32_t>()[i];
    case DType::I16: return t.data<int16_t>()[i];
    case DType::I8: return t.data<int8_t>()[i];
    case DType::U8: return t.data<uint8_t>()[i];
    case DType::U16: return t.data<uint16_t>()[i];
    case DType::U32: return t.data<uint32_t>()[i];
    case DType::U64: return static_cast<int64_t>(t.data<uint64_t>()[i]);
    case DType::Bool: return t.data<uint8_t>()[i] != 0 ? 1 : 0;  // a byte, whatever a file holds
    default: fail("expected an integer tensor, got {}", dtype_name(t.dtype()));
  }
}

std::vector<int64_t> tensor_to_ints(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) v[static_cast<size_t>(i)] = tensor_int_at(t, i);
  return v;
}

double tensor_double_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data<float>()[i];
    case DType::F64: return t.data<double>()[i];
    case DType::F16: return half_to_float(t.data<uint16_t>()[i]);
    case DType::BF16: return bfloat16_to_float(t.data<uint16_t>()[i]);
    default: return static_cast<double>(tensor_int_at(t, i));
  }
}

}  // namespace onebit
