#include "quant/q8_device.h"

#include "base/error.h"

namespace onebit {

Q8DeviceWeight q8_device_weight(const Q8Weight& src) {
  Q8DeviceWeight d;
  d.k = src.k;
  d.n = src.n;
  const size_t ldw = src.ldw ? src.ldw : src.n;
  const int32_t bw = src.type == Q8Type::kU8 ? 128 : 0;
  d.w.resize(d.k * d.n);
  d.cs.assign(d.n, 0);
  const auto* bytes = static_cast<const uint8_t*>(src.data);
  for (size_t kk = 0; kk < d.k; ++kk)
    for (size_t j = 0; j < d.n; ++j) {
      const int32_t v = src.type == Q8Type::kU8 ? int32_t(bytes[kk * ldw + j]) : int32_t(int8_t(bytes[kk * ldw + j]));
      const int8_t s = static_cast<int8_t>(v - bw);
      d.w[kk * d.n + j] = s;
      d.cs[j] += s;
    }
  const size_t zc = src.zero_point ? src.zero_point_count : 1;
  d.cw.resize(zc);
  for (size_t i = 0; i < zc; ++i) {
    d.cw[i] = bw - (src.zero_point ? src.zero_point[i] : 0);
    d.any_cw = d.any_cw || d.cw[i] != 0;
  }
  return d;
}

void q8_device_to_exact(size_t m, const void* x, size_t lda, Q8Type x_type, const Q8Activation& xp,
                        const Q8DeviceWeight& w, int32_t* acc, size_t ldc) {
  const int32_t bx = x_type == Q8Type::kU8 ? 128 : 0;
  const size_t k = w.k, n = w.n;
  const auto* bytes = static_cast<const uint8_t*>(x);
  const uint32_t K = static_cast<uint32_t>(k);
  for (size_t i = 0; i < m; ++i) {
    const int32_t zx = xp.zero_point ? xp.zero_point[xp.zero_point_count > 1 ? i : 0] : 0;
    const uint32_t cx = static_cast<uint32_t>(bx - zx);
    uint32_t rs = 0;
    if (w.any_cw) {
      const uint8_t* row = bytes + i * lda;
      for (size_t kk = 0; kk < k; ++kk)
        rs += static_cast<uint32_t>(x_type == Q8Type::kU8 ? int32_t(row[kk]) - 128 : int32_t(int8_t(row[kk])));
    }
    int32_t* c = acc + i * ldc;
    for (size_t j = 0; j < n; ++j) {
      const uint32_t cw = static_cast<uint32_t>(w.cw[w.cw.size() > 1 ? j : 0]);
      uint32_t v = static_cast<uint32_t>(c[j]) + cx * static_cast<uint32_t>(w.cs[j]) + cw * rs + K * cx * cw;
      c[j] = static_cast<int32_t>(v);
    }
  }
}

}  // namespace onebit
