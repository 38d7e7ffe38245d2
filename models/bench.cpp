#include "models/bench.h"

#include <immintrin.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "graph/kernel.h"

namespace onebit {

uint64_t weight_bytes_per_pass(const Session& session) {
  static const std::set<std::string> kNotCompute = {"Gather", "Shape", "Reshape", "Slice", "Unsqueeze", "Squeeze",
                                                    "Expand", "Range", "Concat", "ConstantOfShape", "Tile"};
  const Graph& g = session.graph();
  std::set<int> seen;
  uint64_t bytes = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.domain.empty() && kNotCompute.count(n.op_type)) continue;
    // A kernel that packed constants reads its packed copies instead of them.
    const Kernel* kernel = session.kernel(i);
    const uint64_t packed = kernel ? kernel->packed_bytes() : 0;
    bytes += packed;
    for (size_t in = 0; in < n.inputs.size(); ++in) {
      const int v = n.inputs[in];
      if (v < 0 || !g.value(v).constant) continue;
      if (packed > 0 && kernel->packs_constant(static_cast<int>(in))) continue;
      if (seen.insert(v).second) bytes += g.value(v).constant->bytes();
    }
  }
  return bytes;
}

namespace {

// One thread's share [begin, end) of `buf` (in 64-byte lines) read as
// `streams` interleaved streams: line j of every stream, then line j + 1;
// the lines past streams x per, then, as one stream.
__attribute__((target("avx512f"))) long long read_streams_avx512(const char* buf, size_t begin, size_t end,
                                                                  int streams) {
  const size_t per = (end - begin) / static_cast<size_t>(streams);
  __m512i acc[16];
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (size_t j = 0; j < per; ++j)
    for (int s = 0; s < streams; ++s)
      acc[s] = _mm512_xor_si512(acc[s], _mm512_load_si512(buf + (begin + static_cast<size_t>(s) * per + j) * 64));
  for (size_t j = begin + per * static_cast<size_t>(streams); j < end; ++j)
    acc[0] = _mm512_xor_si512(acc[0], _mm512_load_si512(buf + j * 64));
  for (int s = 1; s < streams; ++s) acc[0] = _mm512_xor_si512(acc[0], acc[s]);
  alignas(64) long long out[8];
  _mm512_store_si512(out, acc[0]);
  return out[0];
}

__attribute__((target("avx2"))) long long read_streams_avx2(const char* buf, size_t begin, size_t end,
                                                             int streams) {
  const size_t per = (end - begin) / static_cast<size_t>(streams);
  __m256i acc[16];
  for (auto& a : acc) a = _mm256_setzero_si256();
  for (size_t j = 0; j < per; ++j)
    for (int s = 0; s < streams; ++s) {
      const char* line = buf + (begin + static_cast<size_t>(s) * per + j) * 64;
      acc[s] = _mm256_xor_si256(acc[s], _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(line)),
                                                         _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32))));
    }
  for (size_t j = begin + per * static_cast<size_t>(streams); j < end; ++j)
    acc[0] = _mm256_xor_si256(acc[0], _mm256_load_si256(reinterpret_cast<const __m256i*>(buf + j * 64)));
  for (int s = 1; s < streams; ++s) acc[0] = _mm256_xor_si256(acc[0], acc[s]);
  return _mm256_extract_epi64(acc[0], 0);
}

// The STREAM-like reduce: no intrinsics, written as a user would.
__attribute__((target("avx2"))) uint64_t reduce_words(const uint64_t* p, size_t n) {
  uint64_t s[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += p[i + static_cast<size_t>(k)];
  for (; i < n; ++i) s[0] += p[i];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// Best GB/s of `trials` timed passes of `pass(thread)` over `bytes`.
template <class Pass>
double best_of(ThreadPool& pool, size_t bytes, int trials, Pass pass) {
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(pool.size(), pass);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

}  // namespace

ReadLimit measure_read_limit(ThreadPool& pool, size_t bytes, int streams, int trials) {
  ReadLimit r;
  streams = std::clamp(streams, 1, 16);
  const size_t lines = bytes / 64;
  bytes = lines * 64;
  auto* buf = static_cast<char*>(std::aligned_alloc(64, bytes));
  if (!buf) return r;
  std::memset(buf, 1, bytes);  // touch every page first
  const size_t threads = static_cast<size_t>(pool.size());
  std::vector<long long> sink(threads * 8);  // one cache line per thread keeps the loads alive
  const bool wide = cpu_supports(Isa::Avx512);
  r.streams = streams;
  r.trials = trials;
  r.loads = wide ? "avx512" : "avx2";
  r.probe_gbs = best_of(pool, bytes, trials, [&](int64_t t) {
    const size_t begin = lines * static_cast<size_t>(t) / threads, end = lines * static_cast<size_t>(t + 1) / threads;
    sink[static_cast<size_t>(t) * 8] =
        wide ? read_streams_avx512(buf, begin, end, streams) : read_streams_avx2(buf, begin, end, streams);
  });
  const size_t words = bytes / 8;
  const auto* w = reinterpret_cast<const uint64_t*>(buf);
  r.reduce_gbs = best_of(pool, bytes, trials, [&](int64_t t) {
    const size_t begin = words * static_cast<size_t>(t) / threads, end = words * static_cast<size_t>(t + 1) / threads;
    sink[static_cast<size_t>(t) * 8 + 1] = static_cast<long long>(reduce_words(w + begin, end - begin));
  });
  std::free(buf);
  return r;
}

ReadLimit measure_read_limit_isolated(int threads) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (pid == 0) {
    ::close(fds[0]);
    double out[4] = {};
    {
      ThreadPool pool(threads);
      const ReadLimit r = measure_read_limit(pool);
      out[0] = r.probe_gbs, out[1] = r.reduce_gbs, out[2] = r.streams, out[3] = r.trials;
    }
    const ssize_t wrote = ::write(fds[1], out, sizeof out);
    _exit(wrote == sizeof out ? 0 : 1);
  }
  ::close(fds[1]);
  double in[4] = {};
  ReadLimit r;
  if (::read(fds[0], in, sizeof in) == sizeof in) {
    r.probe_gbs = in[0], r.reduce_gbs = in[1];
    r.streams = static_cast<int>(in[2]), r.trials = static_cast<int>(in[3]);
    r.loads = cpu_supports(Isa::Avx512) ? "avx512" : "avx2";
  }
  ::close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return r;
}

uint64_t kv_bytes_per_step(const CausalLmBinding& b, int64_t past, DType stored) {
  if (b.cache == CausalLmBinding::Cache::None || b.layers <= 0 || b.kv_heads <= 0 || b.head_dim <= 0 || past <= 0)
    return 0;
  const int64_t rows = 2 * b.layers * b.kv_heads * past;
  if (stored == DType::I8) return static_cast<uint64_t>(rows * (b.head_dim + 4));  // codes and a float32 scale a row
  return dtype_bytes(stored == DType::Undefined ? b.cache_dtype : stored, rows * b.head_dim);
}

std::vector<int32_t> synthetic_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  const int64_t range = std::max<int64_t>(1, std::min<int64_t>(vocab, 30000) - 100);
  for (auto& id : ids) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = static_cast<int32_t>(100 + static_cast<int64_t>(x % static_cast<uint64_t>(range)));
  }
  return ids;
}

}  // namespace onebit
