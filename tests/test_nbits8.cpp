// MatMulNBits with bits = 8 on the 4-bit GEMM (quant/nbits8.h): the split
// halves hold every code and zero point exactly, the rows are expanded as
// the split weight reads them, the GEMM on the split weight computes the
// 8-bit product within what each activation precision allows (against a
// float64 reference from the 8-bit codes), and the op takes the layouts
// onnxruntime-genai writes and refuses the ones it cannot run, naming them.
// Also MatMulNBits' float16 T1 (transformers.js' model_q4f16): the float32
// product of the widened rows, rounded once to float16.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "quant/nbits8.h"
#include "quant/q4_gemm.h"
#include "quant/ukernels/kernel_config.h"
#include "quant_test_util.h"
#include "tests/op_test_util.h"

using namespace onebit;
using Z = Q4MatMulNBitsWeight::ZeroPoints;

namespace {

// One drawn 8-bit weight in MatMulNBits' layout, with its dequantized [K][N].
struct Drawn {
  size_t k, n, bs, blocks;
  std::vector<uint8_t> b, zp8;
  std::vector<float> scales, zpf;
  std::vector<uint16_t> scales16, zp16;
  Q4MatMulNBitsWeight w;
  std::vector<double> dq;  // [K][N], (c − Z)·s in float64
  std::vector<int> zero;   // [N·blocks] Z
};

Drawn draw(size_t k, size_t n, size_t bs, Z zt, bool f16_scales, unsigned seed) {
  std::mt19937 rng(seed);
  Drawn d{k, n, bs, (k + bs - 1) / bs, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const size_t cells = n * d.blocks;
  d.b.resize(cells * bs);
  for (auto& c : d.b) c = static_cast<uint8_t>(rng() & 255);
  d.scales.resize(cells);
  d.scales16.resize(cells);
  d.zero.resize(cells);
  std::uniform_real_distribution<float> s(0.001f, 0.02f);
  for (size_t i = 0; i < cells; ++i) {
    d.scales16[i] = float_to_half(s(rng));
    d.scales[i] = f16_scales ? half_to_float(d.scales16[i]) : s(rng);
    d.zero[i] = zt == Z::kNone ? 128 : static_cast<int>(rng() & 255);
  }
  d.zp8.assign(d.zero.begin(), d.zero.end());
  d.zpf.assign(d.zero.begin(), d.zero.end());
  for (int z : d.zero) d.zp16.push_back(float_to_half(static_cast<float>(z)));
  d.w.k = k;
  d.w.n = n;
  d.w.block_size = bs;
  d.w.b = d.b.data();
  d.w.scale_type = f16_scales ? Q4FloatType::kF16 : Q4FloatType::kF32;
  d.w.scales = f16_scales ? static_cast<const void*>(d.scales16.data()) : d.scales.data();
  d.w.zero_point_type = zt;
  d.w.zero_points = zt == Z::kPacked ? static_cast<const void*>(d.zp8.data())
                    : zt == Z::kF32  ? static_cast<const void*>(d.zpf.data())
                    : zt == Z::kF16  ? static_cast<const void*>(d.zp16.data())
                                     : nullptr;
  d.dq.resize(k * n);
  for (size_t j = 0; j < n; ++j)
    for (size_t kk = 0; kk < k; ++kk) {
      const size_t i = j * d.blocks + kk / bs;
      d.dq[kk * n + j] = double(int{d.b[i * bs + kk % bs]} - d.zero[i]) * double(d.scales[i]);
    }
  return d;
}

int nibble(const uint8_t* p, size_t i) { return (p[i / 2] >> (4 * (i & 1))) & 15; }

std::vector<float> rows(size_t m, size_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(m * k);
  for (auto& v : x) v = g(rng);
  return x;
}

const char* zname(Z z) {
  return z == Z::kNone ? "none" : z == Z::kPacked ? "uint8" : z == Z::kF32 ? "float" : "float16";
}

}  // namespace

TEST_CASE("nbits8: the split halves hold each code, scale and zero point exactly", "[nbits8]") {
  for (size_t bs : {16, 32, 64})
    for (size_t k : {bs, 2 * bs + 8, 3 * bs})
      for (Z zt : {Z::kNone, Z::kPacked, Z::kF32, Z::kF16})
        for (bool f16 : {false, true}) {
          INFO("bs " << bs << " K " << k << " zero points " << zname(zt) << " f16 scales " << f16);
          const Drawn d = draw(k, 5, bs, zt, f16, static_cast<unsigned>(bs + k));
          const NBits8Split split(d.w);
          const Q4MatMulNBitsWeight& q = split.weight();
          REQUIRE(q.k == 2 * d.blocks * bs);
          REQUIRE(split.split_k() == NBits8Split::split_k(k, bs));
          REQUIRE(q.block_size == bs);
          REQUIRE(q.scale_type == Q4FloatType::kF32);
          REQUIRE(q.zero_point_type == Z::kPacked);
          const auto* zq = static_cast<const uint8_t*>(q.zero_points);
          const auto* sq = static_cast<const float*>(q.scales);
          for (size_t j = 0; j < d.n; ++j)
            for (size_t b = 0; b < d.blocks; ++b) {
              const size_t i = j * d.blocks + b;  // the 8-bit block; the split blocks are 2i and 2i + 1
              const int zh = nibble(zq + j * d.blocks, 2 * b), zl = nibble(zq + j * d.blocks, 2 * b + 1);
              REQUIRE(16 * zh + zl == d.zero[i]);
              REQUIRE(sq[2 * i] == 16 * d.scales[i]);
              REQUIRE(sq[2 * i + 1] == d.scales[i]);
              const uint8_t* hi = q.b + (2 * i) * (bs / 2);
              const uint8_t* lo = q.b + (2 * i + 1) * (bs / 2);
              for (size_t t = 0; t < bs; ++t) {
                const int v = 16 * (nibble(hi, t) - zh) + (nibble(lo, t) - zl);
                const bool inside = b * bs + t < k;
                INFO("column " << j << " block " << b << " t " << t);
                REQUIRE(v == (inside ? int{d.b[i * bs + t]} - d.zero[i] : 0));
              }
            }
        }
}

TEST_CASE("nbits8: the split over a pool is the split on one thread, byte for byte", "[nbits8]") {
  ThreadPool pool(2);
  for (size_t k : {512, 500}) {  // 500: a short last block in every column
    INFO("K " << k);
    const Drawn d = draw(k, 300, 32, Z::kPacked, false, static_cast<unsigned>(k));  // 4800 blocks: the pool splits them
    const NBits8Split one(d.w), two(d.w, &pool);
    const size_t bytes = 300 * d.blocks * 32;
    REQUIRE(std::memcmp(one.weight().b, two.weight().b, bytes) == 0);
    REQUIRE(std::memcmp(one.weight().scales, two.weight().scales, 2 * 300 * d.blocks * sizeof(float)) == 0);
    REQUIRE(std::memcmp(one.weight().zero_points, two.weight().zero_points, 300 * d.blocks) == 0);
  }
}

TEST_CASE("nbits8: rows are expanded as the split weight reads them", "[nbits8]") {
  const size_t m = 2, k = 40, bs = 16, lda = 43;
  std::vector<float> x(m * lda);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) + 0.5f;
  const size_t kk = NBits8Split::split_k(k, bs);
  REQUIRE(kk == 96);  // 3 blocks, each twice
  std::vector<float> out(m * kk, -1.f);
  NBits8Split::expand_rows(m, k, bs, x.data(), lda, out.data());
  for (size_t r = 0; r < m; ++r)
    for (size_t b = 0; b < 3; ++b)
      for (size_t half = 0; half < 2; ++half)
        for (size_t t = 0; t < bs; ++t) {
          const size_t src = b * bs + t;
          INFO("row " << r << " block " << b << " half " << half << " t " << t);
          CHECK(out[r * kk + (2 * b + half) * bs + t] == (src < k ? x[r * lda + src] : 0.f));
        }
}

TEST_CASE("nbits8: the 4-bit GEMM on the split weight computes the 8-bit product", "[nbits8]") {
  ThreadPool pool(2);
  for (const Q4GemmConfig* config : {&q4_gemm_config(), q4_gemm_config_for(Isa::Scalar)})
    for (Q4Act act : {Q4Act::kFloat, Q4Act::kInt8Block, Q4Act::kInt8Row})
      for (size_t bs : {16, 32, 128})
        for (Z zt : {Z::kNone, Z::kPacked})
          for (size_t m : {1, 5}) {
            const size_t k = 3 * bs - 8, n = 37;
            INFO(config->gemm_name[int(act)] << " act " << int(act) << " bs " << bs << " zero points " << zname(zt)
                                             << " m " << m);
            const Drawn d = draw(k, n, bs, zt, false, static_cast<unsigned>(7 * bs + m));
            const NBits8Split split(d.w);
            Q4GemmOptions opt;
            opt.act = act;
            const Q4Gemm gemm(*config, split.weight(), opt, &pool);
            const std::vector<float> x = rows(m, k, static_cast<unsigned>(bs + m));
            std::vector<float> xs(m * split.split_k());
            NBits8Split::expand_rows(m, k, bs, x.data(), k, xs.data());
            const auto ws = quant_test::workspace(gemm.workspace_bytes(m));
            std::vector<float> y(m * n);
            gemm.run(m, xs.data(), split.split_k(), y.data(), n, ws.get(), &pool);
            for (size_t r = 0; r < m; ++r) {
              const float* xr = &x[r * k];
              double amax = 0, lo = 0, hi = 0;
              for (size_t kk = 0; kk < k; ++kk) {
                amax = std::max(amax, double(std::fabs(xr[kk])));
                lo = std::min(lo, double(xr[kk]));
                hi = std::max(hi, double(xr[kk]));
              }
              for (size_t j = 0; j < n; ++j) {
                double ref = 0, mag = 0, wsum = 0, blockstep = 0;
                for (size_t kk = 0; kk < k; ++kk) {
                  const double w = d.dq[kk * n + j];
                  ref += double(xr[kk]) * w;
                  // The split's terms: |x|·(16|h − zh| + |l − zl|)·s ≤ |x|·(|c − Z| + 30)·s.
                  const size_t i = j * d.blocks + kk / bs;
                  mag += std::fabs(xr[kk]) * (std::fabs(w) + 30 * d.scales[i]);
                  wsum += std::fabs(w);
                }
                for (size_t b = 0; b < d.blocks; ++b) {  // int8-block: half a step of each block's own scale
                  double bmax = 0, bw = 0;
                  for (size_t kk = b * bs; kk < std::min(k, (b + 1) * bs); ++kk) {
                    bmax = std::max(bmax, double(std::fabs(xr[kk])));
                    bw += std::fabs(d.dq[kk * n + j]);
                  }
                  blockstep += bmax / 127 / 2 * bw;
                }
                const double rounding = 2.0 * double(split.split_k() + 4) * std::ldexp(1.0, -24) * mag;
                const double quant = act == Q4Act::kFloat       ? 0
                                     : act == Q4Act::kInt8Block ? blockstep
                                                                : (hi - lo) / 255 / 2 * wsum;
                INFO("row " << r << " column " << j << " ref " << ref << " got " << y[r * n + j]);
                REQUIRE(std::fabs(y[r * n + j] - ref) <= 1.01 * (quant + rounding) + 1e-6);
              }
            }
          }
}

TEST_CASE("nbits8: weights the integer kernels cannot hold are errors that name the value", "[nbits8]") {
  Drawn d = draw(64, 3, 32, Z::kF32, false, 1);
  d.zpf[4] = 2.5f;
  CHECK_THROWS_WITH(NBits8Split(d.w), Catch::Contains("zero_points[4] = 2.5"));
  d.zpf[4] = 256.f;
  CHECK_THROWS_WITH(NBits8Split(d.w), Catch::Contains("zero_points[4] = 256"));
  d.zpf[4] = 7.f;
  d.scales[5] = std::nanf("");
  CHECK_THROWS_WITH(NBits8Split(d.w), Catch::Contains("scales[5] (column 2, block 1)"));
  d.scales[5] = 1.f;
  d.w.block_size = 12;
  CHECK_THROWS_WITH(NBits8Split(d.w), Catch::Contains("block_size = 12"));
}

namespace {

// MatMulNBits(x, B, scales[, zero_points]) with bits = 8, as onnxruntime-genai writes it.
test::OpTest nbits8_op(const Drawn& d, const std::vector<float>& x, size_t m, bool zero_points) {
  test::OpTest t("MatMulNBits", 1, "com.microsoft");
  t.attr("K", int64_t(d.k)).attr("N", int64_t(d.n)).attr("bits", int64_t(8)).attr("block_size", int64_t(d.bs));
  t.attr("accuracy_level", int64_t(4));
  t.input(test::make_tensor<float>({int64_t(m), int64_t(d.k)}, x));
  t.constant(test::make_tensor<uint8_t>({int64_t(d.n), int64_t(d.blocks), int64_t(d.bs)}, d.b));
  t.constant(test::make_tensor<float>({int64_t(d.n), int64_t(d.blocks)}, d.scales));
  if (zero_points) t.constant(test::make_tensor<uint8_t>({int64_t(d.n), int64_t(d.blocks)}, d.zp8));
  return t;
}

}  // namespace

TEST_CASE("nbits8: MatMulNBits bits = 8 runs on the split weight, the same on one thread or two", "[nbits8][op]") {
  for (bool zp : {false, true}) {
    const size_t m = 3, k = 72, n = 19;  // K: two blocks of 32 and a short one
    const Drawn d = draw(k, n, 32, zp ? Z::kPacked : Z::kNone, false, 11);
    const std::vector<float> x = rows(m, k, 5);
    const Tensor one = nbits8_op(d, x, m, zp).threads(1).run1();
    const Tensor two = nbits8_op(d, x, m, zp).threads(2).run1();
    REQUIRE(one.shape() == Shape{int64_t(m), int64_t(n)});
    REQUIRE(std::memcmp(one.raw(), two.raw(), one.size() * sizeof(float)) == 0);
    for (size_t r = 0; r < m; ++r)
      for (size_t j = 0; j < n; ++j) {
        double ref = 0, wsum = 0, amax = 0;
        for (size_t kk = 0; kk < k; ++kk) {
          ref += double(x[r * k + kk]) * d.dq[kk * n + j];
          wsum += std::fabs(d.dq[kk * n + j]);
          amax = std::max(amax, double(std::fabs(x[r * k + kk])));
        }
        // The session's default precision quantizes activations per block:
        // within half a step of the largest block scale times Σ|w|, plus rounding.
        INFO("zero points " << zp << " row " << r << " column " << j);
        CHECK(std::fabs(one.data<float>()[r * n + j] - ref) <= amax / 127 / 2 * wsum * 1.01 + 1e-4);
      }
  }
}

TEST_CASE("nbits8: MatMulNBits refuses other bit widths and mis-sized 8-bit inputs, naming them", "[nbits8][op]") {
  const Drawn d = draw(64, 4, 32, Z::kPacked, false, 3);
  const std::vector<float> x = rows(1, 64, 2);
  test::OpTest bits3 = nbits8_op(d, x, 1, false);
  bits3.attr("bits", int64_t(3));
  CHECK_THROWS_WITH(bits3.run1(), Catch::Contains("bits is 3, only 4 and 8 are supported"));
  // A 4-bit sized B under bits = 8.
  test::OpTest half("MatMulNBits", 1, "com.microsoft");
  half.attr("K", int64_t(64)).attr("N", int64_t(4)).attr("bits", int64_t(8)).attr("block_size", int64_t(32));
  half.input(test::make_tensor<float>({1, 64}, x));
  half.constant(test::make_tensor<uint8_t>({4, 2, 16}, std::vector<uint8_t>(128, 0)));
  half.constant(test::make_tensor<float>({4, 2}, std::vector<float>(8, 1.f)));
  CHECK_THROWS_WITH(half.run1(), Catch::Contains("expected uint8 [N=4, 2, 32]"));
  // 8-bit zero points are one byte a block, not packed two to a byte.
  test::OpTest zp = nbits8_op(d, x, 1, false);
  zp.constant(test::make_tensor<uint8_t>({4, 1}, std::vector<uint8_t>(4, 0x88)));
  CHECK_THROWS_WITH(zp.run1(), Catch::Contains("expected N·ceil(blocks·bits/8) = 8"));
  // Attributes whose sizes overflow: an error before any size is used.
  test::OpTest huge = nbits8_op(d, x, 1, false);
  huge.attr("K", int64_t{1} << 62).attr("N", int64_t{1} << 40);
  CHECK_THROWS_WITH(huge.run1(), Catch::Contains("N·blocks") && Catch::Contains("too large"));
}

TEST_CASE("MatMulNBits float16 A: the float32 product of the widened rows, rounded once to float16", "[nbits8][op]") {
  // transformers.js' model_q4f16 layout: A, scales, bias and Y float16.
  for (int64_t bits : {4, 8})
    for (bool bias : {false, true}) {
      INFO("bits " << bits << " bias " << bias);
      const int64_t m = 3, k = 96, n = 21, bs = 32, blocks = 3;
      std::mt19937 rng(static_cast<unsigned>(bits * 2 + bias));
      std::vector<uint8_t> b(static_cast<size_t>(n * blocks * bs * bits / 8));
      for (auto& v : b) v = static_cast<uint8_t>(rng() & 255);
      std::vector<float> scales32(static_cast<size_t>(n * blocks)), bias32(static_cast<size_t>(n)),
          x32(static_cast<size_t>(m * k));
      std::normal_distribution<float> g(0.f, 1.f);
      auto fill = [&](std::vector<float>& f, float scale, float floor) {  // float16 values
        for (auto& v : f) v = half_to_float(float_to_half(scale * g(rng) + floor));
      };
      fill(scales32, 0.005f, 0.02f);
      fill(bias32, 1.f, 0.f);
      fill(x32, 1.f, 0.f);
      // float16 tensors of values float16 holds exactly.
      auto f16 = [](Shape shape, const std::vector<float>& f) {
        return test::make_tensor_as(DType::F16, std::move(shape), std::vector<double>(f.begin(), f.end()));
      };
      auto op = [&](bool half) {
        test::OpTest t("MatMulNBits", 1, "com.microsoft");
        t.attr("K", k).attr("N", n).attr("bits", bits).attr("block_size", bs).attr("accuracy_level", int64_t(4));
        if (half) t.input(f16({m, k}, x32));
        else t.input(test::make_tensor<float>({m, k}, x32));
        t.constant(test::make_tensor<uint8_t>({n, blocks, bs * bits / 8}, b));
        if (half) t.constant(f16({n * blocks}, scales32));
        else t.constant(test::make_tensor<float>({n * blocks}, scales32));
        if (bias) {
          t.omit().omit();  // zero_points, g_idx
          if (half) t.constant(f16({n}, bias32));
          else t.constant(test::make_tensor<float>({n}, bias32));
        }
        return t.run1();
      };
      const Tensor y16 = op(true), y32 = op(false);
      REQUIRE(y16.dtype() == DType::F16);
      REQUIRE(y16.shape() == Shape{m, n});
      for (int64_t i = 0; i < m * n; ++i) {
        INFO("output " << i);
        CHECK(y16.data<uint16_t>()[i] == float_to_half(y32.data<float>()[i]));
      }
    }
}

TEST_CASE("MatMulNBits accuracy_level: auto computes in float at 1 to 3, on int8 blocks at 0 and 4", "[nbits8][op]") {
  // onnxruntime's CPU kernel: levels 1 (float32), 2 (float16) and 3
  // (bfloat16) compute in float32, 4 quantizes the activations to int8, 0
  // is unset; out of range clamps. An explicit --act-precision overrides.
  for (int64_t bits : {4, 8}) {
    INFO("bits " << bits);
    const int64_t m = 3, k = 96, n = 21, bs = 32, blocks = 3;
    std::mt19937 rng(static_cast<unsigned>(bits));
    std::vector<uint8_t> b(static_cast<size_t>(n * blocks * bs * bits / 8));
    for (auto& v : b) v = static_cast<uint8_t>(rng() & 255);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> scales(static_cast<size_t>(n * blocks)), x(static_cast<size_t>(m * k));
    for (auto& v : scales) v = 0.02f + 0.005f * g(rng);
    for (auto& v : x) v = g(rng);
    auto run = [&](int64_t level, ActPrecision act) {
      test::OpTest t("MatMulNBits", 1, "com.microsoft");
      t.attr("K", k).attr("N", n).attr("bits", bits).attr("block_size", bs).attr("accuracy_level", level);
      t.input(test::make_tensor<float>({m, k}, x));
      t.constant(test::make_tensor<uint8_t>({n, blocks, bs * bits / 8}, b));
      t.constant(test::make_tensor<float>({n * blocks}, scales));
      return t.act_precision(act).run1();
    };
    auto same = [](const Tensor& p, const Tensor& q) {
      return p.shape() == q.shape() && std::memcmp(p.raw(), q.raw(), p.bytes()) == 0;
    };
    const Tensor as_float = run(4, ActPrecision::kFloat), as_int8 = run(1, ActPrecision::kInt8Block);
    REQUIRE_FALSE(same(as_float, as_int8));  // the data tells the two apart
    for (int64_t level : {1, 2, 3}) {
      INFO("accuracy_level " << level);
      CHECK(same(run(level, ActPrecision::kAuto), as_float));
    }
    for (int64_t level : {0, 4, 7, -2}) {
      INFO("accuracy_level " << level);
      CHECK(same(run(level, ActPrecision::kAuto), as_int8));
    }
    CHECK(same(run(1, ActPrecision::kInt8Row), run(4, ActPrecision::kInt8Row)));
  }
}
