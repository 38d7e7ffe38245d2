// Two phases, so threads never share an output byte: scales per (block,
// column) in tasks of column runs, then codes in runs of whole k rows
// (starting at even k·N, so two runs never write the same byte).
#include "quant/q4_quantize.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

constexpr size_t kColumnsPerTask = 64;
constexpr size_t kRowsPerTile = 64;  // even: a tile starts at an even element when N is odd

inline int quantize_one(float w, float scale) {
  const float q = std::nearbyint(w / scale);  // the default rounding mode: half to even
  return static_cast<int>(std::min(7.0f, std::max(-8.0f, q)));
}

// The scale as stored: float32, or rounded to float16 (kept inside the
// finite, non-zero float16 range so a tiny block does not get scale 0).
// Float32 storing float16 values keeps to float16's normal range (from
// 2^-14), the values Q4Gemm keeps as float16.
float stored_scale(float s, const Q4QuantizeOptions& opt) {
  if (!opt.float16_scales && !opt.half_values) return s;
  uint16_t h = float_to_half(s);
  if ((h & 0x7FFF) == 0) h = 0x0001;        // smallest subnormal
  if ((h & 0x7C00) == 0x7C00) h = 0x7BFF;   // largest finite
  if (!opt.float16_scales && (h & 0x7C00) == 0) h = 0x0400;  // smallest normal
  return half_to_float(h);
}

double block_error(const float* v, size_t len, float scale) {
  double e = 0;
  for (size_t i = 0; i < len; ++i) {
    const double d = double(v[i]) - double(scale) * quantize_one(v[i], scale);
    e += d * d;
  }
  return e;
}

// The scale of one block (see q4_quantize.h for the rule).
float choose_scale(const float* v, size_t len, const Q4QuantizeOptions& opt) {
  float m = 0.0f;
  for (size_t i = 0; i < len; ++i)
    if (std::fabs(v[i]) > std::fabs(m)) m = v[i];
  const float amax = std::fabs(m);
  if (amax == 0.0f) return 1.0f;
  float best = stored_scale(m < 0 ? amax / 8.0f : amax / 7.0f, opt);
  if (best == 0.0f) return 1.0f;  // |m| below float32's range / 8: the block is zero for our purposes
  if (!opt.clip_search) return best;
  double best_err = block_error(v, len, best);
  for (int step = 0; step <= 8; ++step) {
    const float alpha = 1.0f - 0.03f * static_cast<float>(step);
    for (float d : {7.0f, 8.0f}) {
      const float s = stored_scale(amax * alpha / d, opt);
      if (s == 0.0f) continue;
      const double e = block_error(v, len, s);
      if (e < best_err) {
        best_err = e;
        best = s;
      }
    }
  }
  return best;
}

void set_nibble(uint8_t* p, size_t i, int v) {
  uint8_t& b = p[i / 2];
  b = static_cast<uint8_t>(i & 1 ? (b & 0x0F) | ((v & 15) << 4) : (b & 0xF0) | (v & 15));
}

}  // namespace

Q4Quantized quantize_q4(const Q4Source& w, const Q4QuantizeOptions& opt, const char* name, ThreadPool* pool) {
  if (w.k == 0 || w.n == 0) fail("{}: weight has shape [{}, {}], expected both dims positive", name, w.k, w.n);
  Q4Quantized out;
  out.k = w.k;
  out.n = w.n;
  out.block_size = opt.block_size;
  const size_t bs = opt.block_size ? opt.block_size : w.k;
  out.rows = (w.k + bs - 1) / bs;
  out.scales.assign(out.rows * w.n, 0.0f);
  out.codes.assign((w.k * w.n + 1) / 2, 0);

  // Phase 1: scales and error statistics.
  const size_t col_tasks = (w.n + kColumnsPerTask - 1) / kColumnsPerTask;
  const int64_t tasks = static_cast<int64_t>(out.rows * col_tasks);
  std::mutex merge;
  // Pool tasks must not throw: the first non-finite weight is recorded and
  // reported after the phase.
  bool bad = false;
  size_t bad_k = 0, bad_n = 0;
  float bad_v = 0;
  auto phase1 = [&](int64_t t) {
    const size_t r = static_cast<size_t>(t) / col_tasks, c = static_cast<size_t>(t) % col_tasks;
    const size_t k0 = r * bs, k1 = std::min(w.k, k0 + bs);
    const size_t n0 = c * kColumnsPerTask, n1 = std::min(w.n, n0 + kColumnsPerTask);
    std::vector<float> block(k1 - k0);
    double sq_err = 0, sq = 0, max_err = 0;
    for (size_t n = n0; n < n1; ++n) {
      for (size_t k = k0; k < k1; ++k) {
        const float v = w.at(k, n);
        if (!std::isfinite(v)) {
          std::lock_guard<std::mutex> lock(merge);
          if (!bad || k * w.n + n < bad_k * w.n + bad_n) {
            bad = true;
            bad_k = k;
            bad_n = n;
            bad_v = v;
          }
          return;
        }
        block[k - k0] = v;
      }
      const float s = choose_scale(block.data(), block.size(), opt);
      out.scales[r * w.n + n] = s;
      for (float v : block) {
        const double d = std::fabs(double(v) - double(s) * quantize_one(v, s));
        sq_err += d * d;
        sq += double(v) * double(v);
        max_err = std::max(max_err, d);
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    out.sum_sq_error += sq_err;
    out.sum_sq += sq;
    out.max_abs_error = std::max(out.max_abs_error, max_err);
  };

  // Phase 2: codes, tiles of whole k rows; within a tile column by column
  // so a transposed source is read along its contiguous rows.
  const size_t tiles = (w.k + kRowsPerTile - 1) / kRowsPerTile;
  const int bias = opt.is_signed ? 0 : 8;
  auto phase2 = [&](int64_t t) {
    const size_t k0 = static_cast<size_t>(t) * kRowsPerTile, k1 = std::min(w.k, k0 + kRowsPerTile);
    for (size_t n = 0; n < w.n; ++n)
      for (size_t k = k0; k < k1; ++k)
        set_nibble(out.codes.data(), k * w.n + n, quantize_one(w.at(k, n), out.scales[(k / bs) * w.n + n]) + bias);
  };

  const bool parallel = pool && pool->size() > 1;
  if (parallel) pool->run(tasks, phase1);
  else
    for (int64_t t = 0; t < tasks; ++t) phase1(t);
  if (bad) fail("{}: weight [{}, {}] is {}, expected a finite value", name, bad_k, bad_n, bad_v);
  if (parallel) pool->run(static_cast<int64_t>(tiles), phase2);
  else
    for (size_t t = 0; t < tiles; ++t) phase2(static_cast<int64_t>(t));

  if (opt.float16_scales) {
    out.scales_f16.resize(out.scales.size());
    for (size_t i = 0; i < out.scales.size(); ++i) out.scales_f16[i] = float_to_half(out.scales[i]);
  }
  if (!opt.is_signed) out.zero_points.assign((out.rows * w.n + 1) / 2, 0x88);
  return out;
}

}  // namespace onebit
