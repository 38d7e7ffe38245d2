#include "models/bench.h"

#include <immintrin.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>

#include "base/thread_pool.h"

namespace onebit {

uint64_t weight_bytes_per_pass(const Graph& g) {
  static const std::set<std::string> kNotCompute = {"Gather", "Shape", "Reshape", "Slice", "Unsqueeze", "Squeeze",
                                                    "Expand", "Range", "Concat", "ConstantOfShape", "Tile"};
  std::set<int> seen;
  uint64_t bytes = 0;
  for (const Node& n : g.nodes) {
    if (n.domain.empty() && kNotCompute.count(n.op_type)) continue;
    for (int v : n.inputs) {
      if (v < 0 || !g.value(v).constant || !seen.insert(v).second) continue;
      bytes += g.value(v).constant->bytes();
    }
  }
  return bytes;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes) {
  const size_t n = bytes / sizeof(__m256i);
  auto* buf = static_cast<__m256i*>(std::aligned_alloc(64, n * sizeof(__m256i)));
  if (!buf) return 0;
  std::memset(buf, 1, n * sizeof(__m256i));  // touch every page first
  double best = 0;
  const int threads = pool.size();
  std::vector<long long> sink(static_cast<size_t>(threads) * 8);
  for (int pass = 0; pass < 4; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(threads, [&](int64_t t) {
      const size_t begin = n * static_cast<size_t>(t) / static_cast<size_t>(threads);
      const size_t end = n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
      __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
      size_t i = begin;
      for (; i + 4 <= end; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(buf + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(buf + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(buf + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(buf + i + 3));
      }
      const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
      sink[static_cast<size_t>(t) * 8] = _mm256_extract_epi64(x, 0);  // keeps the loads alive
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(__m256i)) / s / 1e9);
  }
  std::free(buf);
  return best;
}

double measure_read_bandwidth_isolated(int threads) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    ::close(fds[0]);
    double gbs = 0;
    {
      ThreadPool pool(threads);
      gbs = measure_read_bandwidth(pool);
    }
    const ssize_t w = ::write(fds[1], &gbs, sizeof gbs);
    _exit(w == sizeof gbs ? 0 : 1);
  }
  ::close(fds[1]);
  double gbs = 0;
  if (::read(fds[0], &gbs, sizeof gbs) != sizeof gbs) gbs = 0;
  ::close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return gbs;
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
