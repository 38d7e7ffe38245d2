// com.microsoft::MatMulBnb4 (quant/bnb4.h, ops/matmul_bnb4.cpp): the codes,
// high nibble first, over Wᵀ flattened in blocks that may run across rows,
// each lut[code]·absmax; the op's float32 product against a float64
// reference, float16 A as the float32 product rounded once, one thread or
// two the same, and malformed inputs refused by name. The tables are held to
// onnxruntime's own kernel by scripts/tests/test_bnb4.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "quant/bnb4.h"
#include "tests/op_test_util.h"

using namespace onebit;

namespace {

struct Drawn {
  size_t k, n, bs;
  std::vector<uint8_t> b;
  std::vector<float> absmax;     // float16 values, so both storages hold them exactly
  std::vector<uint16_t> absmax16;
};

Drawn draw(size_t k, size_t n, size_t bs, unsigned seed) {
  std::mt19937 rng(seed);
  Drawn d{k, n, bs, std::vector<uint8_t>((n * k + 1) / 2), {}, {}};
  for (auto& v : d.b) v = static_cast<uint8_t>(rng() & 255);
  std::uniform_real_distribution<float> a(0.05f, 2.f);
  for (size_t i = 0; i < (n * k + bs - 1) / bs; ++i) {
    d.absmax16.push_back(float_to_half(a(rng)));
    d.absmax.push_back(half_to_float(d.absmax16.back()));
  }
  return d;
}

Bnb4Weight weight(const Drawn& d, Bnb4Type t, bool f16) {
  Bnb4Weight w;
  w.k = d.k;
  w.n = d.n;
  w.block_size = d.bs;
  w.type = t;
  w.b = d.b.data();
  w.absmax_f16 = f16;
  w.absmax = f16 ? static_cast<const void*>(d.absmax16.data()) : d.absmax.data();
  return w;
}

// Element i of Wᵀ (i = n·K + k): byte i/2, high nibble for even i.
int code_at(const Drawn& d, size_t i) { return i % 2 ? d.b[i / 2] & 15 : d.b[i / 2] >> 4; }

}  // namespace

TEST_CASE("bnb4: the tables' ends and zero", "[bnb4]") {
  const float* nf4 = bnb4_table(Bnb4Type::kNF4);
  const float* fp4 = bnb4_table(Bnb4Type::kFP4);
  CHECK(nf4[0] == -1.f);
  CHECK(nf4[7] == 0.f);
  CHECK(nf4[15] == 1.f);
  for (int c = 1; c < 16; ++c) CHECK(nf4[c] > nf4[c - 1]);  // NormalFloat is sorted
  CHECK(fp4[3] == 1.f);
  CHECK(fp4[11] == -1.f);
  for (int c = 0; c < 8; ++c) CHECK(fp4[c + 8] == -fp4[c]);  // the sign bit is bit 3
}

TEST_CASE("bnb4: each weight is lut[code]·absmax, high nibble first, blocks across rows", "[bnb4]") {
  for (Bnb4Type t : {Bnb4Type::kFP4, Bnb4Type::kNF4})
    for (bool f16 : {false, true})
      for (size_t bs : {16, 64, 128})
        for (size_t k : {64, 40, 33}) {  // 33·7 is odd: the last byte's low nibble is unused
          const size_t n = 7;
          INFO("type " << int(t) << " f16 absmax " << f16 << " block " << bs << " K " << k);
          const Drawn d = draw(k, n, bs, static_cast<unsigned>(k * bs + f16));
          const std::vector<float> wt = bnb4_dequantize_transposed(weight(d, t, f16));
          REQUIRE(wt.size() == n * k);
          for (size_t i = 0; i < n * k; ++i) {
            INFO("element " << i);
            REQUIRE(wt[i] == bnb4_table(t)[code_at(d, i)] * d.absmax[i / bs]);
          }
        }
  Drawn d = draw(16, 4, 16, 1);
  d.absmax[2] = std::nanf("");
  CHECK_THROWS_WITH(bnb4_dequantize_transposed(weight(d, Bnb4Type::kNF4, false)),
                    Catch::Contains("absmax[2] = nan"));
}

namespace {

test::OpTest bnb4_op(const Drawn& d, int64_t type, const Tensor& a, bool f16_absmax) {
  test::OpTest t("MatMulBnb4", 1, "com.microsoft");
  t.attr("K", int64_t(d.k)).attr("N", int64_t(d.n)).attr("block_size", int64_t(d.bs)).attr("quant_type", type);
  t.input(a);
  t.constant(test::make_tensor<uint8_t>({int64_t(d.b.size())}, d.b));
  const int64_t blocks = int64_t(d.absmax.size());
  if (f16_absmax)
    t.constant(test::make_tensor_as(DType::F16, {blocks}, std::vector<double>(d.absmax.begin(), d.absmax.end())));
  else
    t.constant(test::make_tensor<float>({blocks}, d.absmax));
  return t;
}

}  // namespace

TEST_CASE("bnb4: MatMulBnb4 is the float product of the dequantized weight", "[bnb4][op]") {
  const size_t m = 5, k = 72, n = 19, bs = 64;  // blocks run across rows of Wᵀ
  for (int64_t type : {0, 1}) {
    INFO("quant_type " << type);
    const Drawn d = draw(k, n, bs, static_cast<unsigned>(type + 3));
    std::mt19937 rng(9);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(m * k);
    for (auto& v : x) v = half_to_float(float_to_half(g(rng)));  // float16 values, for the float16 run below
    const Tensor a32 = test::make_tensor<float>({int64_t(m), int64_t(k)}, x);
    const Tensor y = bnb4_op(d, type, a32, false).threads(1).run1();
    const Tensor y2 = bnb4_op(d, type, a32, true).threads(2).run1();
    REQUIRE(y.shape() == Shape{int64_t(m), int64_t(n)});
    REQUIRE(std::memcmp(y.raw(), y2.raw(), y.size() * sizeof(float)) == 0);
    const float* lut = bnb4_table(type == 0 ? Bnb4Type::kFP4 : Bnb4Type::kNF4);
    for (size_t r = 0; r < m; ++r)
      for (size_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (size_t kk = 0; kk < k; ++kk) {
          const size_t i = j * k + kk;
          const double w = double(lut[code_at(d, i)] * d.absmax[i / bs]);
          ref += double(x[r * k + kk]) * w;
          mag += std::fabs(double(x[r * k + kk]) * w);
        }
        INFO("row " << r << " column " << j);
        REQUIRE(std::fabs(double(y.data<float>()[r * n + j]) - ref) <= 2.0 * (k + 4) * std::ldexp(1.0, -24) * mag);
      }
    // float16 A: the float32 product of the same values, rounded once.
    const Tensor a16 = test::make_tensor_as(DType::F16, {int64_t(m), int64_t(k)}, std::vector<double>(x.begin(), x.end()));
    const Tensor h = bnb4_op(d, type, a16, true).run1();
    REQUIRE(h.dtype() == DType::F16);
    for (size_t i = 0; i < m * n; ++i) REQUIRE(h.data<uint16_t>()[i] == float_to_half(y.data<float>()[i]));
  }
}

TEST_CASE("bnb4: MatMulBnb4 refuses malformed attributes and inputs, naming them", "[bnb4][op]") {
  const Drawn d = draw(32, 4, 16, 2);
  const Tensor a = test::make_tensor<float>({1, 32}, std::vector<float>(32, 1.f));
  CHECK_THROWS_WITH(bnb4_op(d, 2, a, false).run1(), Catch::Contains("quant_type is 2"));
  Drawn short_b = d;
  short_b.b.pop_back();
  CHECK_THROWS_WITH(bnb4_op(short_b, 1, a, false).run1(), Catch::Contains("ceil(N·K/2) = 64 bytes"));
  Drawn short_absmax = d;
  short_absmax.absmax.pop_back();
  CHECK_THROWS_WITH(bnb4_op(short_absmax, 1, a, false).run1(), Catch::Contains("ceil(N·K/block_size) = 8 values"));
  const Tensor wrong_k = test::make_tensor<float>({1, 31}, std::vector<float>(31, 1.f));
  CHECK_THROWS_WITH(bnb4_op(d, 1, wrong_k, false).run1(), Catch::Contains("expected [..., K=32]"));
  // Attributes whose product overflows: an error before any size is used.
  test::OpTest huge = bnb4_op(d, 1, a, false);
  huge.attr("K", int64_t{1} << 40).attr("N", int64_t{1} << 40);
  CHECK_THROWS_WITH(huge.run1(), Catch::Contains("N·K"));
  test::OpTest zero = bnb4_op(d, 1, a, false);
  zero.attr("block_size", int64_t{0});
  CHECK_THROWS_WITH(zero.run1(), Catch::Contains("block_size=0"));
}
