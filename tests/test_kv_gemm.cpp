// The KV cache's kernels (quant/ukernels/kv_ukernels.h, ops/kv_gemm.h,
// ops/kv_store.h), float32 and float16, on every ISA this CPU runs:
//   - the conversions against base/dtype.h's scalar ones, bit for bit, on
//     random floats, ties, subnormals, infinities and NaNs;
//   - Q·Kᵀ and P·V against the scalar reference, bit for bit, over row,
//     position and head-size edges (and P·V against the float GEMM, whose
//     numerics it shares, at the row counts that switch between them);
//   - attention's two products over a float16 head against the float32
//     ones on the widened rows, bit for bit, for decode-sized and
//     prefill-sized row counts, key runs crossing the widening chunk, one
//     thread and two: a float16 cache differs from float32 only by the
//     rounding of what it stores;
//   - a row alone against the same row among many (lookup decoding's
//     batched verification stays exact with a float16 cache);
//   - KvStore: narrowing on put, growth keeping what is held.
//   - int8 (--kv-dtype q8): the kernels against the scalar reference, the
//     products over an int8 head against float32 on q8_value of each code,
//     bit for bit, row alone against many; KvStore's quantization contract.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/random_util.h"
#include "base/dtype.h"
#include "base/memory_budget.h"
#include "base/thread_pool.h"
#include "ops/kv_gemm.h"
#include "ops/kv_store.h"
#include "ops/sgemm.h"
#include "quant/ukernels/kernel_config.h"
#include "tests/f16_conversion_util.h"
#include "tests/isa_test_util.h"

using namespace onebit;

using onebit::test::check_f16_conversions;
using onebit::test::randn;

namespace {

std::vector<uint16_t> to_halves(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_half(x[i]);
  return h;
}

std::vector<float> widened(const std::vector<uint16_t>& h) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = half_to_float(h[i]);
  return x;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;  // an empty vector's data() may be null
}

KvGemmConfig config_for(Isa isa) {
  const KvGemmConfig cfg{sgemm_config_for(isa), kv_config_for(isa)};
  REQUIRE(cfg.f32);
  REQUIRE(cfg.kv);
  return cfg;
}

// The cache's float16 conversions (tests/f16_conversion_util.h).
void conversions(Isa isa) {
  const KvConfig* cfg = kv_config_for(isa);
  REQUIRE(cfg);
  check_f16_conversions(cfg->widen, cfg->narrow);
}

// Both kernels of this ISA against the scalar ones, for float32 and float16 rows.
void kernels(Isa isa) {
  const KvConfig* cfg = kv_config_for(isa);
  const KvConfig* ref = kv_config_for(Isa::Scalar);
  REQUIRE(cfg);
  for (size_t m : {1, 2, 3, 4, 5, 7, 9})
    for (size_t t : {1, 3, 5, 33, 64, 130})
      for (size_t d : {8, 12, 32, 40, 64, 128}) {
        INFO("m " << m << " t " << t << " d " << d);
        const size_t ldp = t + 3, ldq = d + 1, ldy = d + 5, lds = t + 2;
        const std::vector<float> p = randn(m * ldp, 2), q = randn(m * ldq, 3);
        const std::vector<uint16_t> h = to_halves(randn(t * d, 4));
        const std::vector<float> f = randn(t * d, 5);
        std::vector<float> y(m * ldy, 1.0f), want(m * ldy, 1.0f), s(m * lds, 1.0f), s_want(m * lds, 1.0f);
        cfg->pv_f16(m, t, d, p.data(), ldp, h.data(), d, y.data(), ldy);
        ref->pv_f16(m, t, d, p.data(), ldp, h.data(), d, want.data(), ldy);
        CHECK(same_bits(y.data(), want.data(), y.size()));  // the padding between rows untouched too
        cfg->pv_f32(m, t, d, p.data(), ldp, f.data(), d, y.data(), ldy);
        ref->pv_f32(m, t, d, p.data(), ldp, f.data(), d, want.data(), ldy);
        CHECK(same_bits(y.data(), want.data(), y.size()));
        cfg->qk_f16(m, t, d, q.data(), ldq, h.data(), d, s.data(), lds);
        ref->qk_f16(m, t, d, q.data(), ldq, h.data(), d, s_want.data(), lds);
        CHECK(same_bits(s.data(), s_want.data(), s.size()));
        cfg->qk_f32(m, t, d, q.data(), ldq, f.data(), d, s.data(), lds);
        ref->qk_f32(m, t, d, q.data(), ldq, f.data(), d, s_want.data(), lds);
        CHECK(same_bits(s.data(), s_want.data(), s.size()));
      }
}

// Q·Kᵀ and P·V over a float16 head against float32 on the widened rows.
void products(Isa isa) {
  const KvGemmConfig cfg = config_for(isa);
  ThreadPool pool(2);
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool})
    for (size_t d : {64, 72, 128})
      for (size_t t : {1, 7, 300, 1100})
        for (size_t m : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, 4 * cfg.f32->mr + 1, size_t{100}}) {
          INFO("d " << d << " t " << t << " m " << m << (tp ? ", 2 threads" : ", 1 thread"));
          const std::vector<uint16_t> k16 = to_halves(randn(t * d, 4)), v16 = to_halves(randn(t * d, 5));
          const std::vector<float> k32 = widened(k16), v32 = widened(v16);
          const std::vector<float> q = randn(m * d, 6), p = randn(m * t, 7);
          std::vector<unsigned char> ws16(kv_mix_workspace(cfg, m, t, d, DType::F16) + 64);
          std::vector<unsigned char> ws32(kv_mix_workspace(cfg, m, t, d, DType::F32) + 64);
          auto aligned = [](std::vector<unsigned char>& w) {
            return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(w.data()) + 63) / 64 * 64);
          };
          std::vector<float> s16(m * t), s32(m * t), y16(m * d), y32(m * d);
          kv_scores(cfg, m, t, d, q.data(), d, {k16.data(), DType::F16}, s16.data(), t, tp);
          kv_scores(cfg, m, t, d, q.data(), d, {k32.data(), DType::F32}, s32.data(), t, tp);
          CHECK(same_bits(s16.data(), s32.data(), s16.size()));
          kv_mix(cfg, m, t, d, p.data(), t, {v16.data(), DType::F16}, y16.data(), d, aligned(ws16), tp);
          kv_mix(cfg, m, t, d, p.data(), t, {v32.data(), DType::F32}, y32.data(), d, aligned(ws32), tp);
          CHECK(same_bits(y16.data(), y32.data(), y16.size()));
          // The last row alone: what a decode step computes.
          std::vector<float> s1(t), y1(d);
          kv_scores(cfg, 1, t, d, q.data() + (m - 1) * d, d, {k16.data(), DType::F16}, s1.data(), t, tp);
          kv_mix(cfg, 1, t, d, p.data() + (m - 1) * t, t, {v16.data(), DType::F16}, y1.data(), d, aligned(ws16), tp);
          CHECK(same_bits(s1.data(), s16.data() + (m - 1) * t, t));
          CHECK(same_bits(y1.data(), y16.data() + (m - 1) * d, d));
        }
}

// An int8 head as KvStore writes one: t rows of d codes and t scales.
struct Q8Head {
  std::vector<int8_t> codes;
  std::vector<float> scales, widened;  // widened: q8_value of each code, the float32 rows it stands for
};

Q8Head q8_head(size_t t, size_t d, unsigned seed) {
  KvStore store(DType::I8);
  store.reserve(1, static_cast<int64_t>(d), static_cast<int64_t>(t));
  std::vector<float> rows = randn(t * d, seed, 2.0f);
  if (t > 2) std::fill(rows.begin() + static_cast<long>(d), rows.begin() + static_cast<long>(2 * d), 0.0f);  // a zero row
  store.put(0, 0, rows.data(), static_cast<int64_t>(t));
  const KvRows head = store.head(0);
  Q8Head h;
  const auto* c = static_cast<const int8_t*>(head.data);
  h.codes.assign(c, c + t * d);
  h.scales.assign(head.scales, head.scales + t);
  for (size_t j = 0; j < t; ++j)
    for (size_t i = 0; i < d; ++i) h.widened.push_back(q8_value(h.scales[j], h.codes[j * d + i]));
  return h;
}

void q8_kernels(Isa isa) {
  const KvConfig* cfg = kv_config_for(isa);
  const KvConfig* ref = kv_config_for(Isa::Scalar);
  REQUIRE(cfg);
  for (size_t m : {1, 2, 3, 4, 5, 7, 9})
    for (size_t t : {1, 3, 5, 33, 64, 130})
      for (size_t d : {8, 12, 32, 40, 64, 128, 144}) {
        INFO("m " << m << " t " << t << " d " << d);
        const size_t ldp = t + 3, ldq = d + 1, ldy = d + 5, lds = t + 2;
        const std::vector<float> p = randn(m * ldp, 2), q = randn(m * ldq, 3);
        const Q8Head h = q8_head(t, d, 4);
        std::vector<float> y(m * ldy, 1.0f), want(m * ldy, 1.0f), s(m * lds, 1.0f), s_want(m * lds, 1.0f);
        cfg->pv_q8(m, t, d, p.data(), ldp, h.codes.data(), d, h.scales.data(), y.data(), ldy);
        ref->pv_q8(m, t, d, p.data(), ldp, h.codes.data(), d, h.scales.data(), want.data(), ldy);
        CHECK(same_bits(y.data(), want.data(), y.size()));
        cfg->qk_q8(m, t, d, q.data(), ldq, h.codes.data(), d, h.scales.data(), s.data(), lds);
        ref->qk_q8(m, t, d, q.data(), ldq, h.codes.data(), d, h.scales.data(), s_want.data(), lds);
        CHECK(same_bits(s.data(), s_want.data(), s.size()));
        // The reference itself: float32 on the widened rows.
        ref->pv_f32(m, t, d, p.data(), ldp, h.widened.data(), d, y.data(), ldy);
        CHECK(same_bits(y.data(), want.data(), y.size()));
        ref->qk_f32(m, t, d, q.data(), ldq, h.widened.data(), d, s.data(), lds);
        CHECK(same_bits(s.data(), s_want.data(), s.size()));
      }
}

// Q·Kᵀ and P·V over an int8 head against float32 on the widened rows.
void q8_products(Isa isa) {
  const KvGemmConfig cfg = config_for(isa);
  ThreadPool pool(2);
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool})
    for (size_t d : {64, 72, 128})
      for (size_t t : {1, 7, 300, 1100})
        for (size_t m : {size_t{1}, size_t{2}, size_t{5}, 4 * cfg.f32->mr + 1, size_t{100}}) {
          INFO("d " << d << " t " << t << " m " << m << (tp ? ", 2 threads" : ", 1 thread"));
          const Q8Head k = q8_head(t, d, 4), v = q8_head(t, d, 5);
          const std::vector<float> q = randn(m * d, 6), p = randn(m * t, 7);
          std::vector<unsigned char> ws8(kv_mix_workspace(cfg, m, t, d, DType::I8) + 64);
          std::vector<unsigned char> ws32(kv_mix_workspace(cfg, m, t, d, DType::F32) + 64);
          auto aligned = [](std::vector<unsigned char>& w) {
            return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(w.data()) + 63) / 64 * 64);
          };
          const KvRows k8{k.codes.data(), DType::I8, k.scales.data()}, v8{v.codes.data(), DType::I8, v.scales.data()};
          std::vector<float> s8(m * t), s32(m * t), y8(m * d), y32(m * d);
          kv_scores(cfg, m, t, d, q.data(), d, k8, s8.data(), t, tp);
          kv_scores(cfg, m, t, d, q.data(), d, {k.widened.data(), DType::F32}, s32.data(), t, tp);
          CHECK(same_bits(s8.data(), s32.data(), s8.size()));
          kv_mix(cfg, m, t, d, p.data(), t, v8, y8.data(), d, aligned(ws8), tp);
          kv_mix(cfg, m, t, d, p.data(), t, {v.widened.data(), DType::F32}, y32.data(), d, aligned(ws32), tp);
          CHECK(same_bits(y8.data(), y32.data(), y8.size()));
          std::vector<float> s1(t), y1(d);
          kv_scores(cfg, 1, t, d, q.data() + (m - 1) * d, d, k8, s1.data(), t, tp);
          kv_mix(cfg, 1, t, d, p.data() + (m - 1) * t, t, v8, y1.data(), d, aligned(ws8), tp);
          CHECK(same_bits(s1.data(), s8.data() + (m - 1) * t, t));
          CHECK(same_bits(y1.data(), y8.data() + (m - 1) * d, d));
        }
}

}  // namespace

ONEBIT_ISA_CASE("kv q8: Q.K^T and P.V kernels match the scalar reference, which is float32 on the widened rows",
                "[kv_q8]", Scalar, q8_kernels)
ONEBIT_ISA_CASE("kv q8: Q.K^T and P.V kernels match the scalar reference, which is float32 on the widened rows",
                "[kv_q8]", Avx2, q8_kernels)
ONEBIT_ISA_CASE("kv q8: Q.K^T and P.V kernels match the scalar reference, which is float32 on the widened rows",
                "[kv_q8]", Avx512, q8_kernels)
ONEBIT_ISA_CASE("kv q8: attention products equal float32 on the widened rows", "[kv_q8]", Scalar, q8_products)
ONEBIT_ISA_CASE("kv q8: attention products equal float32 on the widened rows", "[kv_q8]", Avx2, q8_products)
ONEBIT_ISA_CASE("kv q8: attention products equal float32 on the widened rows", "[kv_q8]", Avx512, q8_products)

// Rows of d = 40 (eight-lane blocks only), 44 (blocks and a tail) and 4 (tail only).
static void check_q8_store(const int64_t d, bool errors) {
  INFO("d " << d);
  const int64_t kvh = 3, n = 20;
  KvStore q8(DType::I8);
  std::vector<float> rows = randn(static_cast<size_t>(kvh * n * d), 8, 3.0f);
  for (int64_t i = 0; i < d; ++i) rows[static_cast<size_t>(d + i)] = 0.0f;  // head 0, position 1: all zero
  rows[static_cast<size_t>(2 * d + 5)] = 100.0f;                           // head 0, position 2: one large entry
  rows[static_cast<size_t>(3 * d + 7)] = std::numeric_limits<float>::quiet_NaN();  // position 3: a NaN
  rows[static_cast<size_t>(5 * d - 1)] = std::numeric_limits<float>::quiet_NaN();  // position 4, last: a NaN
  rows[static_cast<size_t>(6 * d - 2)] = -50.0f;                                  // position 5: near the end, large
  rows[static_cast<size_t>(6 * d + 1)] = 90.0f;  // position 6: the max, then a NaN in its lane (d >= 16)
  rows[static_cast<size_t>(6 * d + 9)] = std::numeric_limits<float>::quiet_NaN();
  q8.reserve(kvh, d, 4);
  for (int64_t pos = 0; pos < n; ++pos) {
    q8.reserve(kvh, d, pos + 1);
    for (int64_t h = 0; h < kvh; ++h) q8.put(h, pos, rows.data() + (h * n + pos) * d, 1);
    q8.length = pos + 1;
  }
  REQUIRE(q8.capacity() >= n);
  CHECK(q8.head_stride() == q8.capacity() * (d + 4));
  for (int64_t h = 0; h < kvh; ++h) {
    const KvRows r = q8.head(h);
    REQUIRE(r.dtype == DType::I8);
    // The same rows through the head-stride view GqaMatMul reads.
    const KvRows v = kv_state_head(q8.head(0).data, DType::I8, q8.head_stride(), h, n, d);
    CHECK(v.data == r.data);
    CHECK(v.scales == r.scales);
    for (int64_t pos = 0; pos < n; ++pos) {
      INFO("head " << h << " position " << pos);
      const float* x = rows.data() + (h * n + pos) * d;
      float amax = 0;
      for (int64_t i = 0; i < d; ++i) amax = std::fmax(amax, std::fabs(x[i]));
      const float scale = r.scales[pos];
      REQUIRE(scale == amax / 127.0f);
      for (int64_t i = 0; i < d; ++i) {
        const int8_t code = static_cast<const int8_t*>(r.data)[pos * d + i];
        CHECK(code >= -127);
        // Exactly the contract's code: x · (127 / max|x|) to nearest even, clamped.
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        const float want = std::isnan(x[i]) ? -127.0f : std::fmin(std::fmax(std::nearbyint(x[i] * inv), -127.0f), 127.0f);
        CHECK(code == static_cast<int8_t>(want));
        if (std::isnan(x[i])) {
          CHECK(code == -127);
        } else if (amax > 0) {
          // Within half a step of what it stands for, and the row's largest entry exact.
          CHECK(std::fabs(q8_value(scale, code) - x[i]) <= 0.5f * scale * (1 + 1e-6f));
          if (std::fabs(x[i]) == amax) CHECK(std::abs(code) == 127);
        } else {
          CHECK(code == 0);
        }
      }
    }
  }
  if (!errors) return;
  CHECK_THROWS_WITH(KvStore(DType::I8).reserve(2, 42, 4), Catch::Contains("multiple of 4"));
  CHECK_THROWS_WITH(kv_state_head(q8.head(0).data, DType::I8, q8.head_stride() - 1, 0, n, d),
                    Catch::Contains("not rows of 40 codes"));
  CHECK_THROWS_WITH(kv_state_head(q8.head(0).data, DType::I8, q8.head_stride(), 0, q8.capacity() + 1, d),
                    Catch::Contains("not rows of 40 codes"));
}

TEST_CASE("kv q8: the store quantizes each row with its own scale and keeps both when it grows", "[kv_q8]") {
  check_q8_store(40, true);
  check_q8_store(44, false);
  check_q8_store(4, false);
}

ONEBIT_ISA_CASE("kv f16: conversions match the scalar ones bit for bit", "[kv_f16]", Scalar, conversions)
ONEBIT_ISA_CASE("kv f16: conversions match the scalar ones bit for bit", "[kv_f16]", Avx2, conversions)
ONEBIT_ISA_CASE("kv f16: conversions match the scalar ones bit for bit", "[kv_f16]", Avx512, conversions)
ONEBIT_ISA_CASE("kv: Q.K^T and P.V kernels match the scalar reference", "[kv_f16]", Avx2, kernels)
ONEBIT_ISA_CASE("kv: Q.K^T and P.V kernels match the scalar reference", "[kv_f16]", Avx512, kernels)
ONEBIT_ISA_CASE("kv f16: attention products equal float32 on the widened rows", "[kv_f16]", Scalar, products)
ONEBIT_ISA_CASE("kv f16: attention products equal float32 on the widened rows", "[kv_f16]", Avx2, products)
ONEBIT_ISA_CASE("kv f16: attention products equal float32 on the widened rows", "[kv_f16]", Avx512, products)

TEST_CASE("kv f16: the store narrows on put and keeps what it holds when it grows", "[kv_f16]") {
  const int64_t kvh = 3, d = 40;
  KvStore f16(DType::F16), f32(DType::F32);
  const std::vector<float> rows = randn(static_cast<size_t>(kvh * 20 * d), 8);
  for (KvStore* s : {&f16, &f32}) {
    s->reserve(kvh, d, 4);
    for (int64_t pos = 0; pos < 20; ++pos) {
      s->reserve(kvh, d, pos + 1);  // grows past 4 several times
      for (int64_t h = 0; h < kvh; ++h) s->put(h, pos, rows.data() + (h * 20 + pos) * d, 1);
      s->length = pos + 1;
    }
    REQUIRE(s->capacity() >= 20);
  }
  for (int64_t h = 0; h < kvh; ++h)
    for (int64_t i = 0; i < 20 * d; ++i) {
      const float x = rows[static_cast<size_t>(h * 20 * d + i)];
      const uint16_t got = static_cast<const uint16_t*>(f16.head(h).data)[i];
      REQUIRE(got == float_to_half(x));
      REQUIRE(static_cast<const float*>(f32.head(h).data)[i] == x);
    }
  CHECK(f16.head(0).dtype == DType::F16);
  CHECK_THROWS_WITH(KvStore(DType::BF16), Catch::Contains("bfloat16"));
  // Undefined ("the model's own", which a Session resolves first) outside a session: float32.
  CHECK(KvStore(DType::Undefined).dtype() == DType::F32);
}

// A store of 1 MiB or more lives on huge pages (base/memory_budget.h): 2 MiB
// aligned, the rounding up used as room, counted against the budget and
// given back; growing from the small path onto it and along it keeps every
// row and scale of each dtype; an empty store is sized as asked.
TEST_CASE("kv: a large store is on 2 MiB-aligned pages, keeps its rows as it grows, and returns its budget",
          "[kv_f16][kv_q8]") {
  const int64_t kvh = 8, d = 128, n = 1500;  // 1500 positions x 8 heads: int8 1.6 MB, float32 6.1 MB
  const uint64_t before = memory_in_use();
  const std::vector<float> rows = randn(static_cast<size_t>(kvh * n * d), 9);
  for (DType dt : {DType::F32, DType::F16, DType::I8}) {
    INFO(dtype_name(dt));
    {
      KvStore store(dt), small(dt);
      int64_t grew = 0, last_capacity = 0;
      for (int64_t pos = 0; pos < n; ++pos) {
        store.reserve(kvh, d, pos + 1);
        small.reserve(kvh, d, std::min<int64_t>(pos + 1, 8));
        if (store.capacity() != last_capacity) ++grew;
        last_capacity = store.capacity();
        for (int64_t h = 0; h < kvh; ++h) store.put(h, pos, rows.data() + (h * n + pos) * d, 1);
        store.length = pos + 1;
      }
      CHECK(grew >= 3);
      KvStore empty(dt);
      empty.reserve(kvh, d, 1024);
      empty.reserve(kvh, d, 1032);  // planning: the prompt, then the last step
      const size_t elem_row = static_cast<size_t>(dt == DType::I8 ? d + 4 : d) * dtype_bytes(dt, 1);
      CHECK(static_cast<size_t>(empty.capacity() * kvh) * elem_row <=
            std::max(kHugePageBytes, static_cast<size_t>(1032 * kvh) * elem_row + 4096));  // not 1.5x
      REQUIRE(store.capacity() >= n);
      const size_t elem = dtype_bytes(dt, 1), row = static_cast<size_t>(dt == DType::I8 ? d + 4 : d) * elem;
      const size_t held = static_cast<size_t>(store.capacity() * kvh) * row;
      CHECK(reinterpret_cast<uintptr_t>(store.data()) % kHugePageBytes == 0);
      // Rounded up to one huge page under 2 MiB, else to 4 KiB; the rounding up used as room.
      const size_t unit = held < kHugePageBytes ? kHugePageBytes : 4096;
      const size_t pages = (held + unit - 1) / unit * unit;
      CHECK(pages - held < static_cast<size_t>(kvh) * row);
      CHECK(memory_in_use() - before >= held);
      // Against a store that held each row the small way (the same put, so the same codes and scales).
      KvStore ref(dt);
      ref.reserve(kvh, d, 1);
      for (int64_t pos = 0; pos < n; pos += 97) {
        for (int64_t h = 0; h < kvh; ++h) {
          ref.put(h, 0, rows.data() + (h * n + pos) * d, 1);
          const KvRows got = store.head(h), want = ref.head(h);
          REQUIRE(std::memcmp(static_cast<const unsigned char*>(got.data) + static_cast<size_t>(pos * d) * elem,
                              want.data, static_cast<size_t>(d) * elem) == 0);
          if (dt == DType::I8) REQUIRE(got.scales[pos] == want.scales[0]);
        }
      }
    }
    CHECK(memory_in_use() == before);
  }
}

namespace {

// A prompt's P·V: each row's P ends in exact zeros from its own column on
// (the causal half after Softmax; some rows' zeros negative), a NaN P and a
// value deep among the zeros kept; against the float
// GEMM over every key, bit for bit, with the values all finite and with an
// infinity in a value row where P is 0 (0·inf is NaN: that row is not left out).
void mix_trailing_zeros(Isa isa) {
  const KvGemmConfig cfg = config_for(isa);
  ThreadPool pool(2);
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool})
    for (size_t m : {size_t{60}, size_t{150}, size_t{300}})
      for (bool inf_value : {false, true}) {
        const size_t t = 220, d = 40;
        INFO("m " << m << (inf_value ? ", an infinite value" : "") << (tp ? ", 2 threads" : ", 1 thread"));
        std::vector<float> p = randn(m * t, 11), v = randn(t * d, 12);
        for (size_t r = 0; r < m; ++r)
          for (size_t j = std::min(t, 10 + r * t / m); j < t; ++j) p[r * t + j] = r % 3 == 1 ? -0.0f : 0.0f;
        p[7 * t + t - 1] = std::numeric_limits<float>::quiet_NaN();
        if (m > 80) p[80 * t + t - 40] = 0.25f;  // one value deep in a run of zeros (a block the NaN is not in)
        if (inf_value) v[(t - 5) * d + 3] = std::numeric_limits<float>::infinity();
        const size_t ws = kv_mix_workspace(cfg, m, t, d, DType::F32);
        REQUIRE(ws > 0);  // the GEMM path, not the in-place kernel
        std::vector<unsigned char> w1(ws + 64), w2(sgemm_workspace(*cfg.f32, m, d, t, false, false) + 64);
        auto aligned = [](std::vector<unsigned char>& w) {
          return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(w.data()) + 63) / 64 * 64);
        };
        std::vector<float> got(m * d), want(m * d);
        kv_mix(cfg, m, t, d, p.data(), t, {v.data(), DType::F32}, got.data(), d, aligned(w1), tp);
        sgemm(*cfg.f32, m, d, t, p.data(), t, false, v.data(), d, false, nullptr, want.data(), d, aligned(w2), tp);
        size_t differ = 0, nans = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          differ += std::isnan(got[i]) != std::isnan(want[i]) ||
                    (!std::isnan(got[i]) && std::memcmp(&got[i], &want[i], sizeof(float)) != 0);
          nans += std::isnan(want[i]);
        }
        CHECK(differ == 0);
        CHECK((nans > d) == inf_value);  // the infinity reached every row with a 0 there
      }
}

}  // namespace

ONEBIT_ISA_CASE("kv: a prompt's P.V leaves out the trailing zeros of P without changing a bit", "[kv_mix]", Scalar,
                mix_trailing_zeros)
ONEBIT_ISA_CASE("kv: a prompt's P.V leaves out the trailing zeros of P without changing a bit", "[kv_mix]", Avx2,
                mix_trailing_zeros)
ONEBIT_ISA_CASE("kv: a prompt's P.V leaves out the trailing zeros of P without changing a bit", "[kv_mix]", Avx512,
                mix_trailing_zeros)

// kv_finite_end: one past the last row in [floor, t) with a value the
// kernels read as not finite, for each way the cache stores a row.
TEST_CASE("kv: kv_finite_end finds the last row with a value that is not finite", "[kv_mix]") {
  constexpr size_t t = 40, d = 24;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const float bad : {inf, -inf, nan})
    for (const size_t row : {size_t{0}, size_t{7}, t - 1})
      for (const size_t col : {size_t{0}, size_t{9}, d - 1}) {
        INFO("value " << bad << " at row " << row << ", column " << col);
        std::vector<float> f = randn(t * d, 8);
        f[row * d + col] = bad;
        const std::vector<uint16_t> h = to_halves(f);
        CHECK(kv_finite_end({f.data(), DType::F32}, t, d, 0) == row + 1);
        CHECK(kv_finite_end({h.data(), DType::F16}, t, d, 0) == row + 1);
        // A floor past the row: none in [floor, t).
        CHECK(kv_finite_end({f.data(), DType::F32}, t, d, row + 1) == row + 1);
        CHECK(kv_finite_end({h.data(), DType::F16}, t, d, row + 1) == row + 1);
        if (row + 1 < t) CHECK(kv_finite_end({f.data(), DType::F32}, t, d, t) == t);
      }
  // float16: the largest finite half (0x7bff) is finite, every exponent-all-ones pattern is not.
  std::vector<uint16_t> h(t * d, 0x7bff);
  CHECK(kv_finite_end({h.data(), DType::F16}, t, d, 0) == 0);
  h[5 * d + 2] = 0xfc01;  // a negative NaN
  CHECK(kv_finite_end({h.data(), DType::F16}, t, d, 0) == 6);
  // int8: the widened value scale · code: an infinite or NaN scale, or a
  // finite one whose product with a code overflows; a code of 0 under an
  // infinite scale is 0·inf, NaN.
  std::vector<int8_t> codes(t * d, 1);
  std::vector<float> scales(t, 0.5f);
  CHECK(kv_finite_end({codes.data(), DType::I8, scales.data()}, t, d, 0) == 0);
  scales[3] = std::numeric_limits<float>::max();
  CHECK(kv_finite_end({codes.data(), DType::I8, scales.data()}, t, d, 0) == 0);  // max · 1 is finite
  codes[3 * d + 4] = 2;
  CHECK(kv_finite_end({codes.data(), DType::I8, scales.data()}, t, d, 0) == 4);  // max · 2 overflows
  std::fill(codes.begin() + 20 * d, codes.begin() + 21 * d, int8_t{0});
  scales[20] = inf;
  CHECK(kv_finite_end({codes.data(), DType::I8, scales.data()}, t, d, 0) == 21);
  CHECK(kv_finite_end({codes.data(), DType::I8, scales.data()}, t, d, 21) == 21);
  scales[t - 1] = nan;
  CHECK(kv_finite_end({codes.data(), DType::I8, scales.data()}, t, d, 0) == t);
}
