#include "ops/matmul_shape.h"

#include "base/error.h"

namespace onebit {

Shape MatMulShape::output_shape() const {
  Shape out(dims, dims + rank);
  if (!a_vector) out.push_back(m);
  if (!b_vector) out.push_back(n);
  return out;
}

bool matmul_dtype(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F64:
    case DType::F16:
    case DType::BF16:
    case DType::I32:
    case DType::I64:
    case DType::U32:
    case DType::U64: return true;
    default: return false;
  }
}

MatMulShape matmul_shape(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty())
    fail("inputs have shapes {} and {}; MatMul needs rank >= 1 for both", shape_str(a), shape_str(b));
  MatMulShape s;
  s.a_vector = a.size() == 1;
  s.b_vector = b.size() == 1;
  s.m = s.a_vector ? 1 : a[a.size() - 2];
  s.k = a.back();
  const int64_t kb = s.b_vector ? b[0] : b[b.size() - 2];
  s.n = s.b_vector ? 1 : b.back();
  if (kb != s.k)
    fail("input B has shape {}, expected K={} to match A {}", shape_str(b), s.k, shape_str(a));

  const int ra = s.a_vector ? 0 : static_cast<int>(a.size()) - 2;
  const int rb = s.b_vector ? 0 : static_cast<int>(b.size()) - 2;
  s.rank = ra > rb ? ra : rb;
  if (s.rank > MatMulShape::kMaxBatchRank)
    fail("inputs have shapes {} and {}: {} batch dims, at most {} supported", shape_str(a), shape_str(b), s.rank,
         MatMulShape::kMaxBatchRank);
  s.b_shared = rb == 0;
  // Right-aligned broadcast; steps count elements of whole matrices.
  int64_t a_stride = s.m * s.k, b_stride = s.k * s.n;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int da = d - (s.rank - ra), db = d - (s.rank - rb);
    const int64_t ea = da >= 0 ? a[static_cast<size_t>(da)] : 1;
    const int64_t eb = db >= 0 ? b[static_cast<size_t>(db)] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      fail("batch dims of A {} and B {} do not broadcast (dim {}: {} vs {})", shape_str(a), shape_str(b), d, ea, eb);
    s.dims[d] = ea == 1 ? eb : ea;
    s.a_step[d] = ea == 1 ? 0 : a_stride;
    s.b_step[d] = eb == 1 ? 0 : b_stride;
    a_stride *= ea;
    b_stride *= eb;
    s.batch *= s.dims[d];
    s.a_batches *= ea;
    s.b_batches *= eb;
  }
  return s;
}

}  // namespace onebit
