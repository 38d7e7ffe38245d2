// float16 models (onnxruntime-genai's `-p fp16` CPU builds and float16
// exports) against naive references: com.microsoft MultiHeadAttention (3-D
// and 4-D key/value, bias, past, key_padding_mask, attention_bias,
// unidirectional) and RotaryEmbedding (offset and per-token positions, heads
// from the caches, interleaved, partial), (Skip)SimplifiedLayerNormalization
// on float16, a float16 MatMul on a constant weight (F16wMatMul, with and
// without the pass) and on two activations (the float32 product rounded
// once), the float16 elementwise loops bit for bit against per-element
// rounding, Pow(x, 2) over every float16 value; and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "graph/passes/passes.h"
#include "op_test_util.h"
#include "tests/random_util.h"

using namespace onebit;
using namespace onebit::test;

namespace {

// Rounds every value to float16 and back: what a float16 tensor holds.
std::vector<float> as_half(std::vector<float> v) {
  for (float& x : v) x = half_to_float(float_to_half(x));
  return v;
}

Tensor half_tensor(Shape shape, const std::vector<float>& v) {
  std::vector<Half> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = Half{float_to_half(v[i])};
  return make_tensor<Half>(std::move(shape), h);
}

Tensor typed(DType t, Shape shape, const std::vector<float>& v) {
  return t == DType::F16 ? half_tensor(std::move(shape), v) : make_tensor<float>(std::move(shape), v);
}

// Naive multi-head attention in double. q [B, S, N·H]; k, v [B, N, T, H]
// (past already prepended); add(b, n, s, j) is added to each scaled score.
template <class Add>
std::vector<double> naive_mha(int64_t B, int64_t S, int64_t T, int64_t N, int64_t H, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v, double scale, Add add) {
  std::vector<double> out(static_cast<size_t>(B * S * N * H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        std::vector<double> sc(static_cast<size_t>(T));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < H; ++i)
            dot += static_cast<double>(q[static_cast<size_t>((b * S + s) * N * H + n * H + i)]) *
                   k[static_cast<size_t>(((b * N + n) * T + j) * H + i)];
          sc[static_cast<size_t>(j)] = dot * scale + add(b, n, s, j);
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < H; ++i) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += sc[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(((b * N + n) * T + j) * H + i)];
          out[static_cast<size_t>((b * S + s) * N * H + n * H + i)] = o;
        }
      }
  return out;
}

// [B, L, N·H] rows → [B, N, L, H], with `past` [B, N, P, H] prepended.
std::vector<float> to_bnsh(int64_t B, int64_t L, int64_t N, int64_t H, const std::vector<float>& x,
                           const std::vector<float>& past, int64_t P) {
  std::vector<float> out(static_cast<size_t>(B * N * (P + L) * H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t j = 0; j < P; ++j)
        for (int64_t i = 0; i < H; ++i)
          out[static_cast<size_t>(((b * N + n) * (P + L) + j) * H + i)] = past[static_cast<size_t>(((b * N + n) * P + j) * H + i)];
      for (int64_t j = 0; j < L; ++j)
        for (int64_t i = 0; i < H; ++i)
          out[static_cast<size_t>(((b * N + n) * (P + L) + P + j) * H + i)] = x[static_cast<size_t>((b * L + j) * N * H + n * H + i)];
    }
  return out;
}

}  // namespace

TEST_CASE("MultiHeadAttention: 3-D key and value with bias, past, key padding and unidirectional", "[float16][mha]") {
  const int64_t B = 2, S = 3, P = 2, N = 2, H = 4, T = P + S, D = N * H;
  // A small filter value, so masked keys still weigh in: the value itself is checked.
  const float filter = -2.0f;
  for (DType t : {DType::F32, DType::F16}) {
    CAPTURE(dtype_name(t));
    const bool half = t == DType::F16;
    auto in = [&](size_t n, uint32_t seed) { return half ? as_half(randn(n, seed)) : randn(n, seed); };
    const std::vector<float> q = in(static_cast<size_t>(B * S * D), 1), k = in(static_cast<size_t>(B * S * D), 2),
                             v = in(static_cast<size_t>(B * S * D), 3), bias = in(static_cast<size_t>(3 * D), 4),
                             pk = in(static_cast<size_t>(B * N * P * H), 5), pv = in(static_cast<size_t>(B * N * P * H), 6);
    // Batch 0 keeps every key; batch 1 pads key 1 (a past position).
    const std::vector<int32_t> pad = {1, 1, 1, 1, 1, 1, 0, 1, 1, 1};
    // The reference sees Q, K, V with the bias added, rounded as the kernel's inputs are not: the bias is
    // added in float32 after widening, so the reference adds it to the same widened values.
    std::vector<float> qb(q), kb(k), vb(v);
    for (size_t i = 0; i < qb.size(); ++i) {
      qb[i] += bias[i % D];
      kb[i] += bias[D + i % D];
      vb[i] += bias[2 * D + i % D];
    }
    const std::vector<float> K = to_bnsh(B, S, N, H, kb, pk, P), V = to_bnsh(B, S, N, H, vb, pv, P);
    const double scale = 0.3;
    const auto want = naive_mha(B, S, T, N, H, qb, K, V, scale, [&](int64_t b, int64_t, int64_t s, int64_t j) {
      double a = pad[static_cast<size_t>(b * T + j)] ? 0.0 : filter;
      if (j > P + s) a += filter;
      return a;
    });
    const auto out = OpTest("MultiHeadAttention", 1, "com.microsoft")
                         .attr("num_heads", N)
                         .attr("mask_filter_value", filter)
                         .attr("scale", static_cast<float>(scale))
                         .attr("unidirectional", 1)
                         .input(typed(t, {B, S, D}, q))
                         .input(typed(t, {B, S, D}, k))
                         .input(typed(t, {B, S, D}, v))
                         .constant(typed(t, {3 * D}, bias))
                         .input(make_tensor<int32_t>({B, T}, pad))
                         .omit()
                         .input(typed(t, {B, N, P, H}, pk))
                         .input(typed(t, {B, N, P, H}, pv))
                         .outputs(3)
                         .run();
    REQUIRE(out.size() == 3);
    CHECK(out[0].dtype() == t);
    CHECK(out[0].shape() == Shape{B, S, D});
    CHECK(out[1].shape() == Shape{B, N, T, H});
    CHECK(all_close(to_doubles(out[0]), want, half ? 2e-3 : 1e-5, half ? 2e-3 : 1e-6));
    std::vector<double> kd(K.begin(), K.end()), vd(V.begin(), V.end());
    CHECK(all_close(to_doubles(out[1]), kd, half ? 1e-3 : 0, half ? 1e-3 : 0));
    CHECK(all_close(to_doubles(out[2]), vd, half ? 1e-3 : 0, half ? 1e-3 : 0));
  }
}

TEST_CASE("MultiHeadAttention: 4-D key and value with attention_bias and key lengths, as genai's float16 builds", "[float16][mha]") {
  const int64_t B = 2, S = 2, T = 5, N = 3, H = 8, D = N * H;
  const std::vector<float> q = as_half(randn(static_cast<size_t>(B * S * D), 11)),
                           k = as_half(randn(static_cast<size_t>(B * N * T * H), 12)),
                           v = as_half(randn(static_cast<size_t>(B * N * T * H), 13));
  // attention_bias [1, 1, S, T]: a causal mask for the last S of T positions, in float16's lowest value.
  std::vector<float> ab(static_cast<size_t>(S * T));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < T; ++j) ab[static_cast<size_t>(s * T + j)] = j > T - S + s ? -65504.0f : 0.0f;
  const std::vector<int32_t> lengths = {5, 4};
  const auto want = naive_mha(B, S, T, N, H, q, k, v, 1.0 / std::sqrt(8.0), [&](int64_t b, int64_t, int64_t s, int64_t j) {
    return ab[static_cast<size_t>(s * T + j)] + (j >= lengths[static_cast<size_t>(b)] ? -10000.0 : 0.0);
  });
  const auto y = OpTest("MultiHeadAttention", 1, "com.microsoft")
                     .attr("num_heads", N)
                     .input(half_tensor({B, S, D}, q))
                     .input(half_tensor({B, N, T, H}, k))
                     .input(half_tensor({B, N, T, H}, v))
                     .omit()
                     .input(make_tensor<int32_t>({B}, lengths))
                     .input(half_tensor({1, 1, S, T}, ab))
                     .run1();
  CHECK(y.dtype() == DType::F16);
  CHECK(y.shape() == Shape{B, S, D});
  CHECK(all_close(to_doubles(y), want, 2e-3, 2e-3));
}

TEST_CASE("MultiHeadAttention: errors name the input or attribute", "[float16][mha]") {
  const int64_t B = 1, S = 2, N = 2, H = 4, D = N * H;
  auto base = [&] {
    return OpTest("MultiHeadAttention", 1, "com.microsoft")
        .attr("num_heads", N)
        .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 1)));
  };
  auto msg = [](const OpTest& t) {
    try {
      t.run();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Packed QKV in query (no key): not implemented, said so.
  CHECK_THAT(msg(base()), Catch::Contains("key and value are required"));
  // A key whose hidden size is not num_heads · head size.
  CHECK_THAT(msg(base()
                     .input(make_tensor<float>({B, S, D + 1}, randn(static_cast<size_t>(B * S * (D + 1)), 2)))
                     .input(make_tensor<float>({B, S, D + 1}, randn(static_cast<size_t>(B * S * (D + 1)), 3)))),
             Catch::Contains("do not agree"));
  // attention_bias of the wrong length.
  CHECK_THAT(msg(base()
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 2)))
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 3)))
                     .omit()
                     .omit()
                     .input(make_tensor<float>({1, 1, S, S + 1}, randn(static_cast<size_t>(S * (S + 1)), 4)))),
             Catch::Contains("attention_bias has shape"));
  // key_padding_mask must be int32.
  CHECK_THAT(msg(base()
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 2)))
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 3)))
                     .omit()
                     .input(make_tensor<int64_t>({B, S}, {1, 1}))),
             Catch::Contains("key_padding_mask is int64"));
  // num_heads is required.
  CHECK_THAT(msg(OpTest("MultiHeadAttention", 1, "com.microsoft")
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 1)))
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 2)))
                     .input(make_tensor<float>({B, S, D}, randn(static_cast<size_t>(B * S * D), 3)))),
             Catch::Contains("num_heads"));
}

namespace {

// Naive rotary on x [B, S, N·H] (heads in the hidden dim) at positions pos[b, s].
std::vector<double> naive_rotary(int64_t B, int64_t S, int64_t N, int64_t H, int64_t R, bool interleaved,
                                 const std::vector<float>& x, const std::vector<int64_t>& pos,
                                 const std::vector<float>& cos, const std::vector<float>& sin) {
  std::vector<double> y(x.begin(), x.end());
  const int64_t half = R / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t n = 0; n < N; ++n) {
        const size_t at = static_cast<size_t>((b * S + s) * N * H + n * H);
        const int64_t p = pos[static_cast<size_t>(b * S + s)];
        for (int64_t i = 0; i < half; ++i) {
          const size_t a = at + static_cast<size_t>(interleaved ? 2 * i : i);
          const size_t c = at + static_cast<size_t>(interleaved ? 2 * i + 1 : i + half);
          const double co = cos[static_cast<size_t>(p * half + i)], si = sin[static_cast<size_t>(p * half + i)];
          y[a] = co * x[a] - si * x[c];
          y[c] = si * x[a] + co * x[c];
        }
      }
  return y;
}

}  // namespace

TEST_CASE("RotaryEmbedding (com.microsoft): offset and per-token positions, heads from the caches, interleaved, partial", "[float16][rotary]") {
  const int64_t B = 2, S = 3, N = 2, H = 8, maxp = 12;
  struct Case {
    int64_t heads_attr, rot_attr;
    bool interleaved, offset;
    DType t;
  };
  for (const Case c : {Case{0, 0, false, true, DType::F16}, Case{N, 0, true, false, DType::F32},
                       Case{N, 4, false, false, DType::F16}, Case{N, 4, true, true, DType::F32}}) {
    CAPTURE(c.heads_attr, c.rot_attr, c.interleaved, c.offset, dtype_name(c.t));
    const bool half = c.t == DType::F16;
    const int64_t R = c.rot_attr ? c.rot_attr : H;
    std::vector<float> x = randn(static_cast<size_t>(B * S * N * H), 21), cos, sin;
    for (int64_t p = 0; p < maxp; ++p)
      for (int64_t i = 0; i < R / 2; ++i) {
        cos.push_back(static_cast<float>(std::cos(p * 0.1 * (i + 1))));
        sin.push_back(static_cast<float>(std::sin(p * 0.1 * (i + 1))));
      }
    if (half) x = as_half(x), cos = as_half(cos), sin = as_half(sin);
    std::vector<int64_t> pos(static_cast<size_t>(B * S));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) pos[static_cast<size_t>(b * S + s)] = c.offset ? 4 + s : 2 * s + b;
    const auto want = naive_rotary(B, S, N, H, R, c.interleaved, x, pos, cos, sin);
    OpTest op("RotaryEmbedding", 1, "com.microsoft");
    op.attr("interleaved", c.interleaved ? 1 : 0);
    if (c.heads_attr) op.attr("num_heads", c.heads_attr);
    if (c.rot_attr) op.attr("rotary_embedding_dim", c.rot_attr);
    op.input(typed(c.t, {B, S, N * H}, x));
    op.input(c.offset ? make_tensor<int64_t>({1}, {4}) : make_tensor<int64_t>({B, S}, pos));
    op.constant(typed(c.t, {maxp, R / 2}, cos)).constant(typed(c.t, {maxp, R / 2}, sin));
    const Tensor y = op.run1();
    CHECK(y.dtype() == c.t);
    CHECK(all_close(to_doubles(y), want, half ? 2e-3 : 1e-6, half ? 2e-3 : 1e-6));
    if (half) {
      // Bit for bit: the float products of the float16 values, each output rounded once.
      const std::vector<Half> got = values<Half>(y);
      size_t bad = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t n = 0; n < N; ++n) {
            const size_t at = static_cast<size_t>((b * S + s) * N * H + n * H);
            const int64_t p = pos[static_cast<size_t>(b * S + s)], hf = R / 2;
            for (int64_t i = 0; i < hf; ++i) {
              const size_t a = at + static_cast<size_t>(c.interleaved ? 2 * i : i);
              const size_t e = at + static_cast<size_t>(c.interleaved ? 2 * i + 1 : i + hf);
              const float co = cos[static_cast<size_t>(p * hf + i)], si = sin[static_cast<size_t>(p * hf + i)];
              bad += got[a].bits != float_to_half(co * x[a] - si * x[e]);
              bad += got[e].bits != float_to_half(si * x[a] + co * x[e]);
            }
            for (int64_t i = R; i < H; ++i) bad += got[at + static_cast<size_t>(i)].bits != float_to_half(x[at + static_cast<size_t>(i)]);
          }
      CHECK(bad == 0);
    }
  }
  // A position past the caches, and rotary_embedding_dim without num_heads, are errors.
  CHECK_THROWS_WITH(OpTest("RotaryEmbedding", 1, "com.microsoft")
                        .input(make_tensor<float>({1, 1, H}, randn(static_cast<size_t>(H), 1)))
                        .input(make_tensor<int64_t>({1}, {maxp}))
                        .constant(make_tensor<float>({maxp, H / 2}, randn(static_cast<size_t>(maxp * H / 2), 2)))
                        .constant(make_tensor<float>({maxp, H / 2}, randn(static_cast<size_t>(maxp * H / 2), 3)))
                        .run(),
                    Catch::Contains("outside the cache's 12 positions"));
  CHECK_THROWS_WITH(OpTest("RotaryEmbedding", 1, "com.microsoft")
                        .attr("rotary_embedding_dim", 4)
                        .input(make_tensor<float>({1, 1, H}, randn(static_cast<size_t>(H), 1)))
                        .input(make_tensor<int64_t>({1}, {0}))
                        .constant(make_tensor<float>({maxp, 2}, randn(static_cast<size_t>(maxp * 2), 2)))
                        .constant(make_tensor<float>({maxp, 2}, randn(static_cast<size_t>(maxp * 2), 3)))
                        .run(),
                    Catch::Contains("needs num_heads"));
}

TEST_CASE("(Skip)SimplifiedLayerNormalization on float16: computed in float32, each output rounded once", "[float16][norm]") {
  const int64_t rows = 3, d = 300;
  const std::vector<float> x = as_half(randn(static_cast<size_t>(rows * d), 31)),
                           skip = as_half(randn(static_cast<size_t>(rows * d), 32)),
                           w = as_half(randn(static_cast<size_t>(d), 33)), bias = as_half(randn(static_cast<size_t>(d), 34));
  const float eps = 1e-6f;
  std::vector<double> y(x.size()), sum(x.size()), y_plain(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0, sq_plain = 0;
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      sum[k] = half_to_float(float_to_half(x[k] + skip[k] + bias[static_cast<size_t>(i)]));
      const double s = static_cast<double>(x[k]) + skip[k] + bias[static_cast<size_t>(i)];
      sq += s * s;
      sq_plain += static_cast<double>(x[k]) * x[k];
    }
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(r * d + i);
      const double s = static_cast<double>(x[k]) + skip[k] + bias[static_cast<size_t>(i)];
      y[k] = s / std::sqrt(sq / d + eps) * w[static_cast<size_t>(i)];
      y_plain[k] = x[k] / std::sqrt(sq_plain / d + eps) * w[static_cast<size_t>(i)];
    }
  }
  const auto out = OpTest("SkipSimplifiedLayerNormalization", 1, "com.microsoft")
                       .attr("epsilon", eps)
                       .input(half_tensor({1, rows, d}, x))
                       .input(half_tensor({1, rows, d}, skip))
                       .constant(half_tensor({d}, w))
                       .constant(half_tensor({d}, bias))
                       .outputs(4)
                       .run();
  REQUIRE(out.size() == 4);
  CHECK(out[0].dtype() == DType::F16);
  CHECK(out[2].dtype() == DType::F32);
  CHECK(out[3].dtype() == DType::F16);
  // One float16 rounding of a float32 result: within half an ulp plus float32's error.
  CHECK(all_close(to_doubles(out[0]), y, 1e-3, 1e-4));
  CHECK(to_doubles(out[3]) == sum);
  const Tensor plain = OpTest("SimplifiedLayerNormalization", 1)
                           .attr("epsilon", eps)
                           .input(half_tensor({rows, d}, x))
                           .constant(half_tensor({d}, w))
                           .run1();
  CHECK(plain.dtype() == DType::F16);
  CHECK(all_close(to_doubles(plain), y_plain, 1e-3, 1e-4));
  CHECK_THROWS_WITH(OpTest("SimplifiedLayerNormalization", 1)
                        .input(half_tensor({rows, d}, x))
                        .constant(make_tensor<float>({d}, w))
                        .run(),
                    Catch::Contains("float16 and float32"));
}

TEST_CASE("float16 Add, Mul, Sub, Div: bit for bit the per-element float16 rounding, broadcast both ways", "[float16][binary]") {
  const std::vector<float> a = as_half(randn(4 * 300, 41)), b = as_half(randn(300, 42)), c = as_half(randn(1, 43));
  for (const char* op : {"Add", "Mul", "Sub", "Div"}) {
    CAPTURE(op);
    auto f = [&](float x, float y) {
      const std::string o = op;
      return o == "Add" ? x + y : o == "Mul" ? x * y : o == "Sub" ? x - y : x / y;
    };
    const Tensor full = OpTest(op, 14).input(half_tensor({4, 300}, a)).input(half_tensor({300}, b)).run1();
    const Tensor scalar = OpTest(op, 14).input(half_tensor({1}, c)).input(half_tensor({4, 300}, a)).run1();
    const std::vector<Half> got = values<Half>(full), got_s = values<Half>(scalar);
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      bad += got[i].bits != float_to_half(f(a[i], b[i % 300]));
      bad += got_s[i].bits != float_to_half(f(c[0], a[i]));
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("Add, Mul, Sub, Div on inputs of one shape: the flat loop over threads, bit for bit", "[float16][binary]") {
  // 102000 elements: past the flat loop's grain, so two threads split them,
  // and a float16 run tail (51000 = 199 · 256 + 56 per thread).
  const Shape shape{2, 3, 17000};
  const size_t n = 102000;
  const std::vector<float> a = as_half(randn(n, 44)), b = as_half(randn(n, 45));
  for (DType t : {DType::F32, DType::F16})
    for (int threads : {1, 2})
      for (const char* op : {"Add", "Mul", "Sub", "Div"}) {
        CAPTURE(op, threads, t == DType::F16);
        const std::string o = op;
        auto f = [&](float x, float y) { return o == "Add" ? x + y : o == "Mul" ? x * y : o == "Sub" ? x - y : x / y; };
        const Tensor y = OpTest(op, 14).threads(threads).input(typed(t, shape, a)).input(typed(t, shape, b)).run1();
        REQUIRE(y.shape() == shape);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const float want = f(a[i], b[i]);
          if (t == DType::F16) bad += y.data<uint16_t>()[i] != float_to_half(want);
          else bad += std::memcmp(&y.data<float>()[i], &want, sizeof want) != 0;
        }
        CHECK(bad == 0);
      }
}

TEST_CASE("float16 Sigmoid: the vectorised float32 sigmoid, rounded once", "[float16][unary]") {
  std::vector<float> x = as_half(randn(1000, 51));
  x[0] = 20.0f, x[1] = -20.0f, x[2] = 0.0f;
  const std::vector<Half> got = values<Half>(OpTest("Sigmoid", 13).input(half_tensor({1000}, x)).run1());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    // Within one float16 ulp of the exact value.
    const double got_v = half_to_float(got[i].bits);
    bad += std::fabs(got_v - want) > std::ldexp(1.0, std::ilogb(std::max(want, 6.1e-5)) - 10);
  }
  CHECK(bad == 0);
}

TEST_CASE("float16 MatMul on a constant weight: F16wMatMul, the float32 product rounded once, with and without the pass", "[float16][f16w]") {
  const int64_t M = 5, K = 70, N = 37;
  const std::vector<float> x = as_half(randn(static_cast<size_t>(M * K), 61)), w = as_half(randn(static_cast<size_t>(K * N), 62));
  std::vector<double> want(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[static_cast<size_t>(m * K + k)]) * w[static_cast<size_t>(k * N + n)];
      want[static_cast<size_t>(m * N + n)] = acc;
    }
  auto op = [&] { return OpTest("MatMul", 13).input(half_tensor({1, M, K}, x)).constant(half_tensor({K, N}, w)); };
  const Tensor fused = op().run1();
  CHECK(fused.dtype() == DType::F16);
  CHECK(fused.shape() == Shape{1, M, N});
  CHECK(all_close(to_doubles(fused), want, 1e-3, 1e-3));
  // The pass fired: one F16wMatMul on the float16 weight.
  Session s(op().graph(), default_op_registry(), SessionOptions{});
  CHECK(s.pass_report().get("f16w_fused") == 1);
  REQUIRE(s.graph().nodes.size() == 1);
  CHECK(s.graph().nodes[0].op_type == "F16wMatMul");
  // The plain MatMul (no passes) computes the same values: float16 out of a float32 sum.
  const Tensor plain = op().basic().run1();
  CHECK(all_close(to_doubles(plain), to_doubles(fused), 1e-3, 1e-3));
}

TEST_CASE("Cast between float16 and float32: the vectorised conversions, bit for bit the scalar ones", "[float16][cast]") {
  // Normals, subnormals, the overflow to infinity, signed zeros, infinities and NaN, past one 8-lane block.
  std::vector<float> f = randn(1000, 71);
  const float specials[] = {0.0f, -0.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f, 3e-5f, -2.98e-8f, 1e-10f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  std::copy(std::begin(specials), std::end(specials), f.begin() + 3);
  const Tensor h = OpTest("Cast", 21).attr("to", int64_t{10}).input(make_tensor<float>({1000}, f)).run1();
  REQUIRE(h.dtype() == DType::F16);
  size_t bad = 0;
  for (size_t i = 0; i < f.size(); ++i) bad += h.data<uint16_t>()[i] != float_to_half(f[i]);
  CHECK(bad == 0);
  const Tensor back = OpTest("Cast", 21).attr("to", int64_t{1}).input(h).run1();
  for (size_t i = 0; i < f.size(); ++i) {
    const float want = half_to_float(h.data<uint16_t>()[i]), got = back.data<float>()[i];
    bad += std::memcmp(&want, &got, sizeof(float)) != 0;
  }
  CHECK(bad == 0);
}

TEST_CASE("Softmax on float16 rows: the float32 row kernel on the widened row, rounded once", "[float16][softmax]") {
  const int64_t rows = 5, n = 300;
  std::vector<float> x = as_half(randn(static_cast<size_t>(rows * n), 81));
  x[7] = -65504.0f;  // a masked score
  const std::vector<Half> got = values<Half>(OpTest("Softmax", 13).input(half_tensor({rows, n}, x)).run1());
  size_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double(x[static_cast<size_t>(r * n + j)]));
    for (int64_t j = 0; j < n; ++j) sum += std::exp(double(x[static_cast<size_t>(r * n + j)]) - mx);
    for (int64_t j = 0; j < n; ++j) {
      const double want = std::exp(double(x[static_cast<size_t>(r * n + j)]) - mx) / sum;
      const double g = half_to_float(got[static_cast<size_t>(r * n + j)].bits);
      // Within one float16 ulp of the exact value (subnormal spacing below 6.1e-5).
      bad += std::fabs(g - want) > std::ldexp(1.0, std::max(std::ilogb(std::max(want, 1e-30)), -14) - 10);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("float16 MatMul of two activations: the float32 product of the widened inputs, rounded once",
          "[float16][matmul]") {
  // A float16 export's attention products (no constant B): bit for bit the
  // float32 MatMul on the widened inputs, each output rounded to float16;
  // batched, broadcast batch dims, 2-D and 1-D operands.
  struct Case {
    Shape a, b;
  } cases[] = {{{2, 3, 5, 70}, {2, 3, 70, 37}}, {{1, 9, 33, 64}, {1, 9, 64, 40}}, {{5, 70}, {70, 37}},
               {{2, 1, 4, 8}, {3, 8, 6}}, {{70}, {70, 5}}, {{4, 16}, {16}}, {{1, 3, 1, 64}, {1, 3, 64, 129}}};
  int seed = 80;
  for (const Case& c : cases) {
    INFO("A " << shape_str(c.a) << " B " << shape_str(c.b));
    const std::vector<float> a = as_half(randn(static_cast<size_t>(numel(c.a)), seed++));
    const std::vector<float> b = as_half(randn(static_cast<size_t>(numel(c.b)), seed++));
    const Tensor half = OpTest("MatMul", 13).input(half_tensor(c.a, a)).input(half_tensor(c.b, b)).run1();
    const Tensor wide = OpTest("MatMul", 13).input(make_tensor<float>(c.a, a)).input(make_tensor<float>(c.b, b)).run1();
    REQUIRE(half.dtype() == DType::F16);
    REQUIRE(half.shape() == wide.shape());
    size_t bad = 0;
    for (int64_t i = 0; i < half.size(); ++i) bad += half.data<uint16_t>()[i] != float_to_half(wide.data<float>()[i]);
    CHECK(bad == 0);
  }
}

TEST_CASE("float16 Pow(x, 2): every float16 value squared as pow in double rounds it", "[float16][pow]") {
  // All 65536 bit patterns (subnormals, overflow past 255.9, infinities,
  // NaNs) against the per-element pow in double rounded to float16, for
  // exponents of several types and shapes; an exponent of 3 keeps the loop.
  std::vector<Half> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = Half{static_cast<uint16_t>(i)};
  const Tensor x = make_tensor<Half>({256, 256}, all);
  auto same = [](const Tensor& y, double e) {
    size_t bad = 0;
    for (int64_t i = 0; i < y.size(); ++i) {
      const double v = half_to_float(static_cast<uint16_t>(i));
      const uint16_t want = float_to_half(static_cast<float>(std::pow(v, e)));
      const uint16_t got = y.data<uint16_t>()[i];
      bad += std::isnan(v) ? !std::isnan(half_to_float(got)) : got != want;
    }
    return bad;
  };
  const Tensor e16 = make_tensor<Half>({}, {Half{float_to_half(2.0f)}});
  const Tensor e32 = make_tensor<float>({1, 1}, {2.0f});
  const Tensor e64 = make_tensor<int64_t>({1}, {2});
  for (const Tensor* e : {&e16, &e32, &e64}) {
    INFO("exponent " << dtype_name(e->dtype()) << " " << shape_str(e->shape()));
    const Tensor y = OpTest("Pow", 15).input(x).input(*e).run1();
    REQUIRE(y.dtype() == DType::F16);
    CHECK(y.size() == x.size());
    CHECK(same(y, 2.0) == 0);
  }
  const Tensor cube = OpTest("Pow", 15).input(x).input(make_tensor<float>({}, {3.0f})).run1();
  CHECK(same(cube, 3.0) == 0);
}
