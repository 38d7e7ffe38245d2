#include "ops/kv_gemm.h"

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "base/thread_pool.h"
#include "ops/sgemm.h"

namespace onebit {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Keys widened per run: 64 KiB of float32, so a run stays in L2 while the dot
// kernel reads it back.
constexpr size_t kWidenFloats = 16384;
size_t keys_per_run(size_t d) { return std::max<size_t>(1, kWidenFloats / std::max<size_t>(d, 1)); }

// Up to this many rows read the halves in place (decode, a verification pass
// of a few drafts); more rows reuse V enough to pay for widening it once.
bool mixes_in_place(const KvGemmConfig& cfg, size_t m) { return m <= 4 * cfg.f32->mr; }

const uint16_t* halves(KvRows r) { return static_cast<const uint16_t*>(r.data); }

void check_dtype(KvRows r) {
  if (r.dtype != DType::F32 && r.dtype != DType::F16)
    fail("the KV cache is {}, expected float32 or float16", dtype_name(r.dtype));
}

}  // namespace

KvGemmConfig kv_gemm_config() { return {&sgemm_config(), &kv_f16_config()}; }

size_t kv_attention_workspace(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, DType kv) {
  const size_t f32 = std::max(sgemm_workspace(*cfg.f32, m, t, d, false, true),
                              sgemm_workspace(*cfg.f32, m, d, t, false, false));
  if (kv != DType::F16) return align_up(f32);
  const size_t keys = align_up(std::min(t, keys_per_run(d)) * d * sizeof(float));
  const size_t values = mixes_in_place(cfg, m) ? 0 : align_up(t * d * sizeof(float));
  return std::max(keys, values + align_up(f32));
}

void kv_scores(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* q, size_t ldq, KvRows k,
               float* scores, size_t ldc, void* workspace, ThreadPool* pool) {
  check_dtype(k);
  if (k.dtype == DType::F32)
    return sgemm(*cfg.f32, m, t, d, q, ldq, false, static_cast<const float*>(k.data), d, true, nullptr, scores, ldc,
                 workspace, pool);
  // The dot kernel computes each score on its own: widening the keys a run
  // at a time gives what one call over all of them would.
  float* wide = static_cast<float*>(workspace);
  const size_t run = keys_per_run(d);
  for (size_t j0 = 0; j0 < t; j0 += run) {
    const size_t n = std::min(run, t - j0);
    cfg.f16->widen(n * d, halves(k) + j0 * d, wide);
    sgemm(*cfg.f32, m, n, d, q, ldq, false, wide, d, true, nullptr, scores + j0, ldc, nullptr, pool);
  }
}

void kv_mix(const KvGemmConfig& cfg, size_t m, size_t t, size_t d, const float* p, size_t ldp, KvRows v, float* y,
            size_t ldy, void* workspace, ThreadPool* pool) {
  check_dtype(v);
  if (v.dtype == DType::F32)
    return sgemm(*cfg.f32, m, d, t, p, ldp, false, static_cast<const float*>(v.data), d, false, nullptr, y, ldy,
                 workspace, pool);
  if (m == 0 || d == 0) return;
  if (mixes_in_place(cfg, m)) {
    // Columns split over the pool: each element's chain is the same wherever it runs.
    constexpr size_t kCols = 32;
    const size_t blocks = (d + kCols - 1) / kCols;
    const size_t threads = pool ? static_cast<size_t>(pool->size()) : 1;
    if (threads < 2 || blocks < 2 || m * t * d < (size_t{1} << 16))
      return cfg.f16->pv(m, t, d, p, ldp, halves(v), d, y, ldy);
    const size_t per = (blocks + threads - 1) / threads;
    pool->run(static_cast<int64_t>((blocks + per - 1) / per), [&](int64_t r) {
      const size_t c0 = static_cast<size_t>(r) * per * kCols, c1 = std::min(d, c0 + per * kCols);
      cfg.f16->pv(m, t, c1 - c0, p, ldp, halves(v) + c0, d, y + c0, ldy);
    });
    return;
  }
  float* wide = static_cast<float*>(workspace);
  cfg.f16->widen(t * d, halves(v), wide);
  sgemm(*cfg.f32, m, d, t, p, ldp, false, wide, d, false, nullptr, y, ldy,
        static_cast<unsigned char*>(workspace) + align_up(t * d * sizeof(float)), pool);
}

}  // namespace onebit
