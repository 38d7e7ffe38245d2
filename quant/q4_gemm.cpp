// Q4NX per-call path (quant/q4_gemm.h): activation preparation into the
// workspace, then decode or tiled prefill. Decode on a family with a streams
// kernel: two contiguous shares of the panels a thread, each read as
// sub-ranges side by side (four long streams a thread with VNNI, two with
// AVX2); otherwise one gemv call per run of panels, runs taken dynamically.
//
// Workspace, for M rows:
//   rows    [M][row_bytes]   int8-row: uint8 x_u, int8-block: int8 q; Kp valid (padding means real 0)
//                            float: float x, zero padded to Kp
//   params  int8-row:   s_x [M] float, zp_u [M] int32
//           int8-block: s_xb [M][blocks] float, then −8·Σ_k∈b q [M][blocks] int32
//           float with zero points: Σ_k∈b x [M][blocks] float
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "quant/act_quant.h"
#include "quant/gemm_parallel.h"
#include "quant/q4_gemm.h"

namespace onebit {

using namespace qgemm_detail;

namespace {

constexpr size_t kAlign = 64;

size_t row_bytes(Q4Act act, size_t kp) { return round_up(act == Q4Act::kFloat ? kp * sizeof(float) : kp, kAlign); }

}  // namespace

size_t Q4Gemm::kblock(Q4Act act) const {
  if (bs_) return bs_;
  return act == Q4Act::kInt8Block ? int8_block_ : kp_;
}

size_t Q4Gemm::weight_bytes() const {
  return codes_.bytes() + scales_.bytes() + scales_h_.bytes() + (has_zero_ ? zeros_.bytes() : 0);
}

Q4Weights Q4Gemm::weights(Q4Act act) const {
  Q4Weights w;
  w.codes = codes_.as<Q4Group>();
  w.codes_stride = kp_ / kQ4GroupK;
  w.scale = scales_f16() ? nullptr : scales_.as<float>();
  w.scale_h = scales_f16() ? scales_h_.as<uint16_t>() : nullptr;
  w.scale_stride = scale_rows_ * kQ4NR;
  w.scale_step = bs_ ? kQ4NR : 0;
  w.zero = has_zero_ ? zeros_.as<uint8_t>() : nullptr;
  w.zero_stride = scale_rows_ * kQ4NR;
  w.g = g_.as<float>();
  w.bias = bias_.as<float>();
  w.kp = kp_;
  w.kblock = kblock(act);
  return w;
}

size_t Q4Gemm::workspace_bytes(size_t m, Q4Act act) const {
  const size_t blocks = div_up(kp_, kblock(act));
  size_t params = 0;
  if (act == Q4Act::kInt8Row) params = m * (sizeof(float) + sizeof(int32_t));
  if (act == Q4Act::kInt8Block) params = m * blocks * (sizeof(float) + sizeof(int32_t));
  if (act == Q4Act::kFloat && has_zero_) params = m * blocks * sizeof(float);
  return m * row_bytes(act, kp_) + params;
}

void Q4Gemm::run(size_t m, Q4Act act, const float* x, size_t lda, float* y, size_t ldy, void* workspace,
                 ThreadPool* pool) const {
  const Q4Gemm* self = this;
  run_group(&self, 1, m, act, x, lda, &y, &ldy, workspace, pool);
}

bool Q4Gemm::group_compatible(const Q4Gemm& a, const Q4Gemm& b) {
  return a.config_ == b.config_ && a.k_ == b.k_ && a.kp_ == b.kp_ && a.bs_ == b.bs_ && a.int8_block_ == b.int8_block_;
}

size_t Q4Gemm::group_workspace_bytes(const Q4Gemm* const* gemms, size_t count, size_t m, Q4Act act) {
  size_t bytes = 0;
  for (size_t i = 0; i < count; ++i) bytes = std::max(bytes, gemms[i]->workspace_bytes(m, act));
  return bytes;
}

void Q4Gemm::run_group(const Q4Gemm* const* gemms, size_t count, size_t m, Q4Act act, const float* x, size_t lda,
                       float* const* y, const size_t* ldy, void* workspace, ThreadPool* pool) {
  if (m == 0 || count == 0) return;
  if (count > kMaxGroup) fail("Q4: {} weights in a group, at most {}", count, kMaxGroup);
  const Q4Gemm& g0 = *gemms[0];
  const size_t k_ = g0.k_, kp_ = g0.kp_;
  bool has_zero = false;  // float activations: the block sums, when any member has zero points
  size_t panels = 0, n_all = 0;
  for (size_t j = 0; j < count; ++j) {
    const Q4Gemm& g = *gemms[j];
    if (!group_compatible(g0, g))
      fail("Q4: weight {} of a group ({}x{}, block {}) does not match the first ({}x{}, block {})", j, g.k_, g.n_,
           g.bs_, g0.k_, g0.n_, g0.bs_);
    if (ldy[j] < g.n_) fail("Q4: output row stride {} is less than N = {}", ldy[j], g.n_);
    has_zero = has_zero || g.has_zero_;
    panels += g.panels_;
    n_all += g.n_;
  }
  if (lda < k_) fail("Q4: activation row stride {} is less than K = {}", lda, k_);
  const size_t kb = g0.kblock(act), blocks = div_up(kp_, kb);
  const size_t rb = row_bytes(act, kp_);
  char* rows = static_cast<char*>(workspace);
  char* params = rows + m * rb;
  float* scale = reinterpret_cast<float*>(params);  // s_x [M], s_xb or Σx [M][blocks]
  int32_t* zero = reinterpret_cast<int32_t*>(params + m * sizeof(float));
  int32_t* qbias = reinterpret_cast<int32_t*>(params + m * blocks * sizeof(float));  // int8-block

  split_ranges(pool, m, double(m) * double(k_) >= kMinParallelMacs, [&](size_t m0, size_t m1) {
    for (size_t i = m0; i < m1; ++i) {
      const float* xi = x + i * lda;
      char* row = rows + i * rb;
      if (act == Q4Act::kFloat) {
        float* f = reinterpret_cast<float*>(row);
        std::memcpy(f, xi, k_ * sizeof(float));
        std::memset(f + k_, 0, (kp_ - k_) * sizeof(float));
        if (has_zero)
          for (size_t b = 0; b < blocks; ++b) {
            float s = 0.0f;
            for (size_t k = b * kb; k < (b + 1) * kb && k < kp_; ++k) s += f[k];
            scale[i * blocks + b] = s;
          }
        continue;
      }
      int8_t* q = reinterpret_cast<int8_t*>(row);
      if (act == Q4Act::kInt8Row) {
        const QD8Params p = quantize_qd8(xi, k_, q);
        std::memset(q + k_, static_cast<int8_t>(p.zero_point), kp_ - k_);  // real 0
        scale[i] = p.scale;
        zero[i] = p.zero_point + 128;
      } else {
        // The blocks K covers, then −8·Σq from their sums; blocks past K
        // (K padded by a block or more) have scale 0 and no codes.
        const size_t live = div_up(k_, kb);
        quantize_symmetric_blocks(xi, k_, kb, q, scale + i * blocks, qbias + i * blocks);
        for (size_t b = 0; b < live; ++b) qbias[i * blocks + b] *= -8;
        std::fill(scale + i * blocks + live, scale + (i + 1) * blocks, 0.0f);
        std::fill(qbias + i * blocks + live, qbias + (i + 1) * blocks, 0);
        std::memset(q + k_, 0, kp_ - k_);
        continue;
      }
      // int8-row kernels take unsigned bytes: x_u = q + 128.
      uint8_t* u = reinterpret_cast<uint8_t*>(row);
      for (size_t k = 0; k < kp_; ++k) u[k] ^= 0x80;
    }
  });

  Q4Acts first_row;
  first_row.data = rows;
  first_row.lda = act == Q4Act::kFloat ? rb / sizeof(float) : rb;
  first_row.blocks = blocks;
  if (act == Q4Act::kInt8Row) {
    first_row.scale = scale;
    first_row.zero = zero;
  } else if (act == Q4Act::kInt8Block) {
    first_row.scale = scale;
    first_row.qbias = qbias;
  } else {
    first_row.bsum = scale;
  }
  auto acts_at = [&](size_t i) { return q4_acts_from_row(first_row, act, i); };
  const Q4GemmConfig& cfg = *g0.config_;
  const int ai = static_cast<int>(act);
  const bool worth = double(m) * double(k_) * double(n_all) >= kMinParallelMacs;
  // The weights end to end: unit u of the whole is unit u - first[j] of
  // member j (units: gemv calls for decode, panels for prompts).
  size_t first[kMaxGroup + 1];
  Q4Weights w[kMaxGroup];
  for (size_t j = 0; j < count; ++j) w[j] = gemms[j]->weights(act);
  auto member_of = [&](size_t u, size_t j) {
    while (j + 1 < count && first[j + 1] <= u) ++j;
    return j;
  };

  if (m == 1 && cfg.gemv_streams[ai]) {
    // One row: the members' panels end to end, split into two contiguous
    // shares a thread (taken dynamically), each walked as the family's
    // stream count of sub-ranges side by side: several long streams a thread.
    first[0] = 0;
    for (size_t j = 0; j < count; ++j) first[j + 1] = first[j] + gemms[j]->panels_;
    const Q4Acts a = acts_at(0);
    const Q4GemvStreamsUkernel streams = cfg.gemv_streams[ai];
    run_streams(pool, panels, cfg.streams, worth, [&](const size_t* panel, size_t live) {
      const Q4Weights* ws[kMaxDecodeStreams];
      size_t pn[kMaxDecodeStreams], nc[kMaxDecodeStreams];
      float* c[kMaxDecodeStreams];
      for (size_t s = 0; s < live; ++s) {
        const size_t j = member_of(panel[s], 0), n = gemms[j]->n_;
        pn[s] = panel[s] - first[j];
        const size_t n0 = pn[s] * kQ4NR;
        ws[s] = &w[j];
        nc[s] = n - n0 < kQ4NR ? n - n0 : kQ4NR;
        c[s] = y[j] + n0;
      }
      streams(live, ws, pn, a, c, nc);
    });
    return;
  }
  if (m == 1) {
    const size_t nc_call = cfg.gemv_nc[ai], per_call = nc_call / kQ4NR;
    first[0] = 0;
    for (size_t j = 0; j < count; ++j) first[j + 1] = first[j] + div_up(gemms[j]->panels_, per_call);
    const Q4Acts a = acts_at(0);
    const size_t scale_bytes = w[0].scale_h ? sizeof(uint16_t) : sizeof(float);
    const size_t call_bytes = per_call * (w[0].codes_stride * sizeof(Q4Group) + w[0].scale_stride * scale_bytes);
    split_runs(pool, first[count], div_up(kDecodeRunBytes, call_bytes), worth, [&](size_t b, size_t e) {
      size_t j = member_of(b, 0);
      for (size_t u = b; u < e; ++u) {
        j = member_of(u, j);
        const size_t i = u - first[j], n = gemms[j]->n_;
        const size_t n0 = i * nc_call, nc = n - n0 < nc_call ? n - n0 : nc_call;
        cfg.gemv[ai][gemms[j]->has_zero_](1, nc, w[j], i * per_call, a, y[j] + n0, 0);
      }
    });
    return;
  }
  first[0] = 0;
  for (size_t j = 0; j < count; ++j) first[j + 1] = first[j] + gemms[j]->panels_;
  const size_t mr = cfg.mr[ai];
  run_tiles(pool, m, panels, mr, worth, [&](size_t row0, size_t row1, size_t pan0, size_t pan1) {
    size_t j = member_of(pan0, 0);
    for (size_t u = pan0; u < pan1; ++u) {
      j = member_of(u, j);
      const size_t p = u - first[j], n = gemms[j]->n_;
      const size_t n0 = p * kQ4NR, nc = n - n0 < kQ4NR ? n - n0 : kQ4NR;
      const Q4GemmUkernel gemm = cfg.gemm[ai][gemms[j]->has_zero_];
      for (size_t i = row0; i < row1; i += mr)
        gemm(row1 - i < mr ? row1 - i : mr, nc, w[j], p, acts_at(i), y[j] + i * ldy[j] + n0, ldy[j]);
    }
  });
}

}  // namespace onebit
