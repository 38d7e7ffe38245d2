// What `1bit bench` measures: for each prompt length, one greedy run of a
// fixed number of new tokens (EOS ignored, so every run does the same work),
// timed as prefill (the first step) and decode (every later step), with the
// bytes of constant weights a decode step reads, the achieved GB/s, and the
// machine's streaming-read bandwidth measured in the same process so the
// ratio holds on a noisy machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/session.h"
#include "models/causal_lm.h"

namespace onebit {

class ThreadPool;

// Bytes of weights the session's compute nodes read in one pass: every
// constant input except the embedding table a Gather reads one row of and
// the small tensors shape ops read; for a kernel that packed its constants
// at load (Kernel::packed_bytes), its packed copies instead of them (a
// float32 weight quantized to int8 by --int8 counts its int8 panels).
uint64_t weight_bytes_per_pass(const Session& session);

// The read limit a decode step is measured against (GB/s), taken with the
// run's thread count over a buffer far larger than the caches, best of
// `trials` passes each:
//   probe   the access pattern the GEMM kernels use: each thread reads its
//           share as `streams` interleaved streams (one per output panel),
//           with the widest loads the CPU has (AVX-512 where present);
//   reduce  an independent STREAM-like reduce: a plain C++ sum of 64-bit
//           words, as the compiler vectorises it, 8 accumulators;
//   limit   the better of the two: the best read this machine sustained.
struct ReadLimit {
  double probe_gbs = 0, reduce_gbs = 0;
  int streams = 0, trials = 0;
  const char* loads = "";  // "avx512" or "avx2"
  double limit_gbs() const { return probe_gbs > reduce_gbs ? probe_gbs : reduce_gbs; }
};
ReadLimit measure_read_limit(ThreadPool& pool, size_t bytes = size_t{1} << 30, int streams = 8, int trials = 7);
// The same in a child process with `threads` threads, so the probe's
// buffer never counts in this process's peak RSS. Zeros when it fails.
ReadLimit measure_read_limit_isolated(int threads);

// Bytes of KV cache a decode step reads at `past` positions of history
// (keys and values of every layer), from the binding's cache geometry; 0
// when the graph keeps no cache or its geometry is unknown. `stored`: what
// the session keeps it as (--kv-dtype), else the graph's cache dtype.
uint64_t kv_bytes_per_step(const CausalLmBinding& b, int64_t past, DType stored = DType::Undefined);

struct BenchRow {
  int64_t prompt_tokens = 0;
  int64_t new_tokens = 0;
  double prefill_ms = 0;
  double decode_ms_per_token = 0;
  double prefill_tok_s() const { return prompt_tokens / (prefill_ms / 1000.0); }
  double decode_tok_s() const { return 1000.0 / decode_ms_per_token; }
};

// A deterministic prompt of `n` ids below `vocab`, spread over the vocabulary.
std::vector<int32_t> synthetic_prompt(int64_t n, int64_t vocab);

}  // namespace onebit
