// The read limit of models/bench.h against the number of interleaved
// streams per thread, at 1 and 2 threads: which access pattern this machine
// reads fastest, beside the STREAM-like reduce measured in the same pass.
//   ninja -C build read_sweep && build/bench/read_sweep [MiB]
#include <cstdio>
#include <cstdlib>

#include "base/thread_pool.h"
#include "models/bench.h"

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  std::printf("| threads | streams per thread | probe GB/s | STREAM-like reduce GB/s |\n|---:|---:|---:|---:|\n");
  for (int threads : {1, 2}) {
    onebit::ThreadPool pool(threads);
    for (int streams : {1, 2, 4, 8, 16}) {
      const onebit::ReadLimit r = onebit::measure_read_limit(pool, mib << 20, streams, 5);
      std::printf("| %d | %d | %.1f | %.1f |\n", threads, streams, r.probe_gbs, r.reduce_gbs);
    }
  }
}
