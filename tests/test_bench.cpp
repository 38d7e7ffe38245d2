// The measurements `1bit bench` divides by (models/bench.h): the read limit
// and the KV bytes a decode step reads.
#include <catch2/catch.hpp>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "models/bench.h"

using namespace onebit;

TEST_CASE("bench: the read limit reports both probes and takes the better", "[bench]") {
  ThreadPool pool(2);
  // 64 MiB: past the caches of the machines we run on, small enough for a test.
  const ReadLimit r = measure_read_limit(pool, size_t{64} << 20, 8, 3);
  CHECK(r.probe_gbs > 0);
  CHECK(r.reduce_gbs > 0);
  CHECK(r.streams == 8);
  CHECK(r.trials == 3);
  CHECK(std::string(r.loads) == (cpu_supports(Isa::Avx512) ? "avx512" : "avx2"));
  CHECK(r.limit_gbs() == std::max(r.probe_gbs, r.reduce_gbs));
  // A share that is not a multiple of the streams, and more streams than
  // the buffer has lines per thread, still read (no division by zero).
  CHECK(measure_read_limit(pool, 64 * 7 + 3, 16, 1).probe_gbs > 0);
}

TEST_CASE("bench: KV bytes per decode step follow the cache geometry", "[bench]") {
  CausalLmBinding b;
  b.cache = CausalLmBinding::Cache::PerLayer;
  b.layers = 2, b.kv_heads = 4, b.head_dim = 8;
  CHECK(kv_bytes_per_step(b, 10) == 2u * 2 * 4 * 8 * 10 * 4);  // keys and values, float32
  b.cache_dtype = DType::F16;
  CHECK(kv_bytes_per_step(b, 10) == 2u * 2 * 4 * 8 * 10 * 2);
  b.cache_dtype = DType::F32;  // a float32 graph whose session keeps its cache in float16 (--kv-dtype f16)
  CHECK(kv_bytes_per_step(b, 10, DType::F16) == 2u * 2 * 4 * 8 * 10 * 2);
  CHECK(kv_bytes_per_step(b, 0) == 0);
  b.head_dim = 0;  // geometry unknown
  CHECK(kv_bytes_per_step(b, 10) == 0);
  b.head_dim = 8;
  b.cache = CausalLmBinding::Cache::None;
  CHECK(kv_bytes_per_step(b, 10) == 0);
}
