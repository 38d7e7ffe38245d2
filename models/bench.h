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

// Bytes of constant tensors read by the graph's compute nodes in one pass:
// every constant input except the embedding table a Gather reads one row of
// and the small tensors shape ops read.
uint64_t weight_bytes_per_pass(const Graph& g);

// Streaming read bandwidth (GB/s) over a buffer far larger than the caches,
// using the pool's threads; the best of a few passes.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30);
// The same in a child process with `threads` threads, so the probe's
// buffer never counts in this process's peak RSS.
double measure_read_bandwidth_isolated(int threads);

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
