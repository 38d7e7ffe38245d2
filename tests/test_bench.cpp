// The measurements `1bit bench` divides by (models/bench.h): the read limit
// and the KV bytes a decode step reads.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "graph/kernel.h"
#include "graph/onnx/onnx_loader.h"
#include "model_builder.h"
#include "models/bench.h"
#include "ops/register_ops.h"
#include "tests/random_util.h"

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

TEST_CASE("bench: the cpu line names the vendor, the family and the kernel level", "[bench]") {
  const CpuFeatures& f = cpu_features();
  CHECK(f.vendor.size() == 12);  // every x86-64 CPU answers CPUID leaf 0
  CHECK(f.amd() == (f.vendor == "AuthenticAMD"));
  char family[16];
  std::snprintf(family, sizeof family, "0x%X", f.family);
  CHECK(cpu_summary() == f.vendor + " family " + family + ", kernels " + isa_name(isa_limit()));
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

TEST_CASE("bench: weight bytes count what the kernels read, packed copies included", "[bench]") {
  // An embedding Gather (one row a step: not counted), then x · W with W a
  // float32 [K, N] constant: as float32 in place, or quantized to int8
  // panels at load (--int8), whose bytes are what a step reads.
  const int64_t k = 96, n = 40, vocab = 50;
  test::ModelBuilder b;
  b.input("ids", 7, {1}).output("y", 1, {1, n});
  b.initializer<float>("table", 1, {vocab, k}, test::randn(static_cast<size_t>(vocab * k), 1));
  b.initializer<float>("w", 1, {k, n}, test::randn(static_cast<size_t>(k * n), 2));
  b.node("Gather", {"table", "ids"}, {"x"});
  b.node("MatMul", {"x", "w"}, {"y"});
  const std::string path = test::scratch_dir("bench_bytes") + "/model.onnx";
  b.save(path);

  Session plain(load_onnx(path), default_op_registry(), SessionOptions{});
  CHECK(weight_bytes_per_pass(plain) == uint64_t(k * n * 4));

  SessionOptions o;
  o.qd8 = true;
  Session int8(load_onnx(path), default_op_registry(), o);
  uint64_t packed = 0;
  int qd8_nodes = 0;
  for (size_t i = 0; i < int8.graph().nodes.size(); ++i)
    if (int8.graph().nodes[i].op_type == "Qd8MatMul") {
      ++qd8_nodes;
      packed = int8.kernel(i)->packed_bytes();
    }
  REQUIRE(qd8_nodes == 1);
  // int8 codes (padded to the panel shape) and the epilogue's per-column
  // constants (an int32 and a double).
  CHECK(packed >= uint64_t(k * n + n * 12));
  CHECK(packed < uint64_t(k * n * 2));
  CHECK(weight_bytes_per_pass(int8) == packed);
}
