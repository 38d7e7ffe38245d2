// A model file is untrusted input (docs/reliability.md). Each case here is a
// well-formed or nearly well-formed file that attacks the executor: it must
// end in a clean onebit::Error naming what was wrong — or in the reference
// result — never a crash, a wrapped size, an allocation past the budget or
// undefined behaviour (the sanitized build runs this file too). The first
// group are regressions of the findings of a fuzzing probe on 3439ef1, each of
// which crashed, allocated 2^63 bytes or read out of bounds there.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/error.h"
#include "base/memory_budget.h"
#include "graph/npy.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "models/model_files.h"
#include "model_builder.h"
#include "ops/broadcast.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kUint8 = 2, kInt8 = 3, kInt16 = 5, kInt32 = 6, kInt64 = 7;

std::string save(const ModelBuilder& b, const std::string& name) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  return path;
}

// The message of the Error that loading, creating the session or running
// `path` on `inputs` ends in; fails the test when it succeeds.
std::string error_of(const std::string& path, const std::vector<NamedTensor>& inputs = {}) {
  try {
    Session s(load_onnx(path), default_op_registry());
    s.run(inputs);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected " << path << " to be refused");
  return {};
}

std::vector<Tensor> run(const std::string& path, const std::vector<NamedTensor>& inputs = {}) {
  Session s(load_onnx(path), default_op_registry());
  return s.run(inputs);
}

Tensor ints(DType t, const Shape& shape, const std::vector<int64_t>& v) {
  Tensor x = Tensor::allocate(t, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::I64) x.data<int64_t>()[i] = v[i];
    else if (t == DType::I32) x.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    else if (t == DType::I16) x.data<int16_t>()[i] = static_cast<int16_t>(v[i]);
    else if (t == DType::I8) x.data<int8_t>()[i] = static_cast<int8_t>(v[i]);
    else if (t == DType::U8) x.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
  }
  return x;
}

// The memory budget for one scope.
struct Budget {
  uint64_t old;
  explicit Budget(uint64_t bytes) : old(memory_limit()) { set_memory_limit(bytes); }
  ~Budget() { set_memory_limit(old); }
};

}  // namespace

// ---- regressions of the probe's findings (3439ef1) --------------------------

TEST_CASE("hostile: a node that writes one name twice is refused at load (was a read past the node list)",
          "[hostile][regression]") {
  ModelBuilder b;
  b.input("x", kFloat, {4}).output("y", kFloat, {2});
  b.initializer<int64_t>("s", kInt64, {2}, {2, 2});
  b.node("Split", {"x", "s"}, {"y", "y"}, "split");
  const std::string path = save(b, "hostile_dup_output");
  CHECK_THROWS_WITH(load_onnx(path), Catch::Contains("node 'split' (Split): writes 'y' twice"));
}

TEST_CASE("hostile: fusion matchers read a producer with too few inputs safely (was a read past its input list)",
          "[hostile][regression]") {
  // The RMSNorm shape x * Reciprocal(Sqrt(...)) * w, with a Sqrt that has no
  // input at all: the matcher walks through it before any kernel checks arity.
  ModelBuilder b;
  b.input("x", kFloat, {1, 4}).output("y", kFloat, {1, 4});
  b.initializer<float>("w", kFloat, {4}, {1, 1, 1, 1});
  b.node("Sqrt", {}, {"s"}, "sqrt");
  b.node("Reciprocal", {"s"}, {"r"}, "recip");
  b.node("Mul", {"x", "r"}, {"xr"}, "mul_x");
  b.node("Mul", {"xr", "w"}, {"y"}, "mul_w");
  const std::string path = save(b, "hostile_short_producer");
  Tensor x = Tensor::allocate(DType::F32, {1, 4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = 1.0f;
  CHECK_THAT(error_of(path, {{"x", x}}), Catch::Contains("node 'sqrt' (Sqrt)"));
}

TEST_CASE("hostile: a value listed twice as a graph output is returned twice (was a copy from a moved tensor)",
          "[hostile][regression]") {
  ModelBuilder b;
  b.input("x", kFloat, {10, 3}).input("y", kFloat, {10, 3});
  b.output("y", kFloat, {10, 3}).output("z", kFloat, {10, 3}).output("z", kFloat, {10, 3});
  b.node("Add", {"x", "y"}, {"z"}, "add");
  Tensor x = Tensor::allocate(DType::F32, {10, 3}), y = Tensor::allocate(DType::F32, {10, 3});
  for (int i = 0; i < 30; ++i) x.data<float>()[i] = static_cast<float>(i), y.data<float>()[i] = 0.5f;
  const auto out = run(save(b, "hostile_output_twice"), {{"x", x}, {"y", y}});
  REQUIRE(out.size() == 3);
  for (int k = 1; k < 3; ++k) {
    REQUIRE(out[k].shape() == Shape{10, 3});
    CHECK(out[k].data<float>()[29] == 29.5f);
  }
}

TEST_CASE("hostile: a file naming 1bit's own domain is refused at load (its kernels trust their pass)", "[hostile]") {
  // A GqaMatMul over a "KV state" whose head stride the file chooses would read past the cache.
  ModelBuilder b;
  auto* os = b.proto().add_opset_import();
  os->set_domain("com.onebit");
  os->set_version(1);
  b.input("a", kFloat, {1, 2, 1, 4}).input("kv", kFloat, {1, 2, 3, 4}).output("y", kFloat, {1, 2, 1, 3});
  b.initializer<int64_t>("stride", kInt64, {}, {int64_t{1} << 40});
  b.node("GqaMatMul", {"a", "kv", "", "", "stride"}, {"y"}, "gqa").set_domain("com.onebit");
  const std::string path = save(b, "hostile_onebit_domain");
  CHECK_THROWS_WITH(load_onnx(path), Catch::Contains("node 'gqa' (com.onebit::GqaMatMul): domain 'com.onebit' is 1bit's own"));
}

TEST_CASE("hostile: a node without its first output is refused at load", "[hostile]") {
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("x", kFloat, {2});
  b.node("Relu", {"x"}, {""}, "relu");
  const std::string path = save(b, "hostile_no_first_output");
  CHECK_THROWS_WITH(load_onnx(path), Catch::Contains("node 'relu' (Relu): has no first output"));
}

TEST_CASE("hostile: a graph whose every output is an input or a constant plans and runs (was an empty plan read)",
          "[hostile][regression]") {
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("x", kFloat, {2}).output("c", kFloat, {1});
  b.initializer<float>("c", kFloat, {1}, {7});
  const std::string path = save(b, "hostile_no_nodes");
  Session s(load_onnx(path), default_op_registry());
  Tensor x = Tensor::allocate(DType::F32, {2});
  s.reserve({{"x", x}});
  const auto out = s.run({{"x", x}});
  REQUIRE(out.size() == 2);
  CHECK(out[1].data<float>()[0] == 7.0f);
}

TEST_CASE("hostile: huge ConstantOfShape, Expand and MatMul are not materialized at load (was 2^63-byte allocations)",
          "[hostile][regression]") {
  {
    ModelBuilder b;
    b.output("y", kFloat, {-1, -1});
    b.initializer<int64_t>("shape", kInt64, {2}, {int64_t{1} << 24, int64_t{1} << 24});
    b.node("ConstantOfShape", {"shape"}, {"y"}, "huge_cos");
    const std::string path = save(b, "hostile_huge_cos");
    Session s(load_onnx(path), default_op_registry());  // loads: nothing made yet
    CHECK_THROWS_WITH(s.run({}), Catch::Contains("huge_cos") && Catch::Contains("2^48 bytes"));
  }
  {
    ModelBuilder b;
    b.output("y", kFloat, {-1, -1, -1});
    b.initializer<float>("one", kFloat, {1}, {1});
    b.initializer<int64_t>("shape", kInt64, {3}, {1 << 20, 1 << 20, 1 << 20});
    b.node("Expand", {"one", "shape"}, {"y"}, "huge_expand");
    const std::string path = save(b, "hostile_huge_expand");
    CHECK_THAT(error_of(path), Catch::Contains("huge_expand"));
  }
  {
    // [2^17, 1] x [1, 2^17] of constants: 64 GiB of output from 1 MiB of input.
    ModelBuilder b;
    b.output("y", kFloat, {-1, -1});
    std::vector<float> col(size_t{1} << 17, 1.0f);
    b.initializer<float>("a", kFloat, {1 << 17, 1}, col);
    b.initializer<float>("b", kFloat, {1, 1 << 17}, col);
    b.node("MatMul", {"a", "b"}, {"y"}, "outer");
    const std::string path = save(b, "hostile_huge_matmul");
    Session s(load_onnx(path), default_op_registry());
    CHECK_THROWS_WITH(s.run({}), Catch::Contains("outer") && Catch::Contains("memory budget"));
  }
}

TEST_CASE("hostile: Tile whose output shape overflows is an error (was signed overflow)", "[hostile][regression]") {
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {-1});
  b.initializer<int64_t>("reps", kInt64, {1}, {std::numeric_limits<int64_t>::max() / 2 + 7});
  b.node("Tile", {"x", "reps"}, {"y"}, "tile");
  CHECK_THAT(error_of(save(b, "hostile_tile"), {{"x", Tensor::allocate(DType::F32, {2})}}),
             Catch::Contains("tile") && Catch::Contains("too large"));
}

TEST_CASE("hostile: Einsum on integers wraps as numpy does (was signed overflow)", "[hostile][regression]") {
  ModelBuilder b;
  b.input("x", kInt64, {2}).output("y", kInt64, {});
  auto& n = b.node("Einsum", {"x", "x"}, {"y"}, "dot");
  auto* a = n.add_attribute();
  a->set_name("equation");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("i,i->");
  const int64_t big = int64_t{1} << 62;
  const auto y = run(save(b, "hostile_einsum"), {{"x", ints(DType::I64, {2}, {big, big})}});
  // 2·(2^62)² mod 2^64 = 2^125 mod 2^64 = 0, as numpy's int64 gives.
  CHECK(y[0].data<int64_t>()[0] == 0);
}

TEST_CASE("hostile: integer Pow wraps as Mul does, and a float exponent converts as Cast (was NaN to int)",
          "[hostile][regression]") {
  {
    ModelBuilder b;
    b.input("x", kInt32, {3}).input("e", kInt32, {3}).output("y", kInt32, {3});
    b.node("Pow", {"x", "e"}, {"y"}, "pow");
    const auto y = run(save(b, "hostile_pow_int"),
                       {{"x", ints(DType::I32, {3}, {3, -1, 2})}, {"e", ints(DType::I32, {3}, {40, -3, -1})}});
    CHECK(y[0].data<int32_t>()[0] == 689956897);  // 3^40 mod 2^32
    CHECK(y[0].data<int32_t>()[1] == -1);
    CHECK(y[0].data<int32_t>()[2] == 0);  // 1 / 2 truncated
  }
  {
    ModelBuilder b;
    b.input("x", kInt64, {1}).input("e", kInt64, {1}).output("y", kInt64, {1});
    b.node("Pow", {"x", "e"}, {"y"}, "pow");
    const auto y = run(save(b, "hostile_pow_int64"),
                       {{"x", ints(DType::I64, {1}, {-7})}, {"e", ints(DType::I64, {1}, {21})}});
    CHECK(y[0].data<int64_t>()[0] == -558545864083284007);  // (-7)^21 mod 2^64
  }
  {
    ModelBuilder b;
    b.input("x", kInt16, {2}).input("e", kFloat, {2}).output("y", kInt16, {2});
    b.node("Pow", {"x", "e"}, {"y"}, "pow");
    Tensor e = Tensor::allocate(DType::F32, {2});
    e.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    e.data<float>()[1] = 0.5f;
    const auto y = run(save(b, "hostile_pow_float_exp"), {{"x", ints(DType::I16, {2}, {5, 16})}, {"e", e}});
    CHECK(y[0].data<int16_t>()[0] == 0);  // NaN -> INT32_MIN, low 16 bits
    CHECK(y[0].data<int16_t>()[1] == 4);
  }
}

TEST_CASE("hostile: an element count whose byte size wraps is refused (was a 4-byte buffer read far past)",
          "[hostile][regression]") {
  // 2^62 + 1 float32 elements: × 4 wraps to 4 bytes in 64 bits.
  ModelBuilder b;
  b.output("y", kFloat, {-1});
  b.initializer<int64_t>("shape", kInt64, {1}, {(int64_t{1} << 62) + 1});
  b.node("ConstantOfShape", {"shape"}, {"c"}, "cos");
  b.node("Abs", {"c"}, {"y"}, "abs");
  CHECK_THAT(error_of(save(b, "hostile_wrap_bytes")), Catch::Contains("node 'cos'") && Catch::Contains("invalid"));
}

TEST_CASE("hostile: an .npy header whose shape times item size wraps is refused", "[hostile][regression]") {
  const std::string path = scratch_dir("hostile_npy_wrap") + "/x.npy";
  // 10^12 · 10^12 elements: each dim fits, the product does not.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 1000000000000), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  f.put(static_cast<char>(header.size() & 0xff));
  f.put(static_cast<char>(header.size() >> 8));
  f << header;
  f.close();
  CHECK_THROWS_WITH(read_npy(path), Catch::Contains("x.npy") && Catch::Contains("2^50"));
}

TEST_CASE("hostile: integer Div and Mod by zero and INT_MIN / -1 are errors naming the node (was SIGFPE)",
          "[hostile][regression]") {
  for (const char* op : {"Div", "Mod"}) {
    ModelBuilder b;
    b.input("a", kInt32, {2}).input("b", kInt32, {2}).output("y", kInt32, {2});
    b.node(op, {"a", "b"}, {"y"}, "div");
    const std::string path = save(b, std::string("hostile_") + op);
    CHECK_THAT(error_of(path, {{"a", ints(DType::I32, {2}, {6, 1})}, {"b", ints(DType::I32, {2}, {3, 0})}}),
               Catch::Contains("node 'div'") && Catch::Contains("division by zero"));
    CHECK_THAT(error_of(path, {{"a", ints(DType::I32, {2}, {INT32_MIN, 1})}, {"b", ints(DType::I32, {2}, {-1, 1})}}),
               Catch::Contains("node 'div'") && Catch::Contains("does not fit"));
  }
}

// ---- classes of hostile input -------------------------------------------------

TEST_CASE("hostile: allocations past --max-memory are errors naming the node and the bytes", "[hostile]") {
  ModelBuilder b;
  b.input("x", kFloat, {-1}).output("y", kFloat, {-1});
  b.node("Relu", {"x"}, {"y"}, "relu");
  const std::string path = save(b, "hostile_budget");
  Tensor x = Tensor::allocate(DType::F32, {1 << 20});  // 4 MiB in, 4 MiB out
  Budget budget(memory_in_use() + (uint64_t{1} << 20));
  CHECK_THAT(error_of(path, {{"x", x}}), Catch::Contains("memory budget") && Catch::Contains("MiB"));
}

TEST_CASE("packed-weight buffers: zeroed, aligned, counted against the budget and given back", "[hostile]") {
  const uint64_t before = memory_in_use();
  for (size_t bytes : {size_t{100}, AlignedBuffer::kPagesFrom - 1, AlignedBuffer::kPagesFrom,
                       AlignedBuffer::kPagesFrom + 12345, size_t{5} << 20}) {
    INFO("bytes " << bytes);
    {
      AlignedBuffer b(bytes, "a test buffer");
      const auto* p = b.as<unsigned char>();
      CHECK(reinterpret_cast<uintptr_t>(p) % AlignedBuffer::kAlign == 0);
      CHECK(memory_in_use() >= before + bytes);
      size_t nonzero = 0;
      for (size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
      CHECK(nonzero == 0);
      std::memset(b.as<unsigned char>(), 0xAB, bytes);  // every byte is writable
    }
    CHECK(memory_in_use() == before);
  }
  // Pages aligned beyond 4 KiB keep their alignment, and a bad one is refused.
  void* p = budgeted_pages(3 << 20, size_t{2} << 20, "a test mapping");
  CHECK(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20) == 0);
  static_cast<unsigned char*>(p)[(3 << 20) - 1] = 1;
  budgeted_pages_free(p, 3 << 20);
  CHECK(memory_in_use() == before);
  CHECK_THROWS_WITH(budgeted_pages(4096, 3000, "a test mapping"), Catch::Contains("alignment 3000"));
  // Past the budget: an error naming what it was for, before anything is mapped.
  Budget budget(memory_in_use() + (uint64_t{1} << 20));
  CHECK_THROWS_WITH(AlignedBuffer(size_t{8} << 20, "Q4 packed codes"),
                    Catch::Contains("Q4 packed codes") && Catch::Contains("memory budget"));
  CHECK(memory_in_use() == before);
}

TEST_CASE("hostile: shapes that overflow are errors naming the shape", "[hostile]") {
  ModelBuilder b;
  b.input("x", kFloat, {1}).output("y", kFloat, {-1, -1, -1});
  b.initializer<int64_t>("s", kInt64, {3}, {int64_t{1} << 30, int64_t{1} << 30, int64_t{1} << 30});
  b.node("Expand", {"x", "s"}, {"y"}, "expand");
  CHECK_THAT(error_of(save(b, "hostile_shape"), {{"x", Tensor::allocate(DType::F32, {1})}}),
             Catch::Contains("expand") && Catch::Contains("invalid shape [1073741824,1073741824,1073741824]"));
}

TEST_CASE("hostile: out-of-range indices are errors and negative ones count from the end", "[hostile]") {
  ModelBuilder b;
  b.input("i", kInt64, {1}).output("y", kFloat, {1, 2});
  b.initializer<float>("t", kFloat, {3, 2}, {0, 1, 2, 3, 4, 5});
  b.node("Gather", {"t", "i"}, {"y"}, "gather");
  const std::string path = save(b, "hostile_gather");
  CHECK(run(path, {{"i", ints(DType::I64, {1}, {-1})}})[0].data<float>()[0] == 4.0f);
  for (int64_t bad : {int64_t{3}, int64_t{-4}, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()})
    CHECK_THAT(error_of(path, {{"i", ints(DType::I64, {1}, {bad})}}), Catch::Contains("gather"));

  ModelBuilder e;
  e.input("i", kInt64, {2, 1}).output("y", kFloat, {2, 1});
  e.initializer<float>("t", kFloat, {2, 2}, {0, 1, 2, 3});
  ModelBuilder::attr_int(e.node("GatherElements", {"t", "i"}, {"y"}, "ge"), "axis", 1);
  const std::string ge = save(e, "hostile_gather_elements");
  CHECK_THAT(error_of(ge, {{"i", ints(DType::I64, {2, 1}, {0, 2})}}), Catch::Contains("ge"));

  ModelBuilder s;
  s.input("i", kInt64, {1, 1}).output("y", kFloat, {2, 2});
  s.initializer<float>("t", kFloat, {2, 2}, {0, 1, 2, 3});
  s.initializer<float>("u", kFloat, {1, 1}, {9});
  ModelBuilder::attr_int(s.node("ScatterElements", {"t", "i", "u"}, {"y"}, "se"), "axis", 0);
  CHECK_THAT(error_of(save(s, "hostile_scatter"), {{"i", ints(DType::I64, {1, 1}, {5})}}), Catch::Contains("se"));
}

TEST_CASE("hostile: degenerate attributes and inputs are refused", "[hostile]") {
  {
    ModelBuilder b;
    b.output("y", kInt64, {-1});
    b.initializer<int64_t>("s", kInt64, {}, {0});
    b.initializer<int64_t>("l", kInt64, {}, {10});
    b.initializer<int64_t>("d", kInt64, {}, {0});
    b.node("Range", {"s", "l", "d"}, {"y"}, "range");
    CHECK_THAT(error_of(save(b, "hostile_range")), Catch::Contains("range") && Catch::Contains("delta is 0"));
  }
  {
    ModelBuilder b;
    b.input("x", kFloat, {4}).output("y", kFloat, {-1});
    b.initializer<int64_t>("st", kInt64, {1}, {0});
    b.initializer<int64_t>("en", kInt64, {1}, {4});
    b.initializer<int64_t>("ax", kInt64, {1}, {0});
    b.initializer<int64_t>("sp", kInt64, {1}, {0});
    b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"}, "slice");
    CHECK_THAT(error_of(save(b, "hostile_slice"), {{"x", Tensor::allocate(DType::F32, {4})}}),
               Catch::Contains("slice"));
  }
  {
    ModelBuilder b;
    b.input("x", kFloat, {2, 3}).output("y", kFloat, {-1, -1});
    ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"y"}, "t"), "perm", {0, 0});
    CHECK_THAT(error_of(save(b, "hostile_perm"), {{"x", Tensor::allocate(DType::F32, {2, 3})}}),
               Catch::Contains("'t'"));
  }
  {
    ModelBuilder b;
    b.input("x", kFloat, {2, 3}).output("y", kFloat, {-1, -1});
    b.initializer<int64_t>("s", kInt64, {2}, {-1, -1});
    b.node("Reshape", {"x", "s"}, {"y"}, "reshape");
    CHECK_THAT(error_of(save(b, "hostile_reshape"), {{"x", Tensor::allocate(DType::F32, {2, 3})}}),
               Catch::Contains("reshape"));
  }
  {
    // Range's inputs of different types (a read of int8 data as int64).
    ModelBuilder b;
    b.output("y", kInt64, {-1});
    b.initializer<int64_t>("s", kInt64, {}, {0});
    b.initializer<int64_t>("l", kInt64, {}, {4});
    b.initializer<int8_t>("d", kInt8, {}, {1});
    b.node("Range", {"s", "l", "d"}, {"y"}, "range");
    CHECK_THAT(error_of(save(b, "hostile_range_types")), Catch::Contains("range"));
  }
}

TEST_CASE("hostile: a graph of 200,000 nodes loads, plans and runs without recursion", "[hostile]") {
  ModelBuilder b;
  const int n = 200000;
  const auto name = [](int i) {  // appended, not "x" + ...: gcc 12 warns falsely (-Wrestrict) on that
    std::string s = "x";
    s += std::to_string(i);
    return s;
  };
  b.input(name(0), kFloat, {1}).output(name(n), kFloat, {1});
  for (int i = 0; i < n; ++i) b.node("Neg", {name(i)}, {name(i + 1)});
  const std::string path = save(b, "hostile_deep");
  Tensor x = Tensor::allocate(DType::F32, {1});
  x.data<float>()[0] = 3.0f;
  const auto y = run(path, {{"x0", x}});
  CHECK(y[0].data<float>()[0] == 3.0f);  // an even number of negations
}

TEST_CASE("hostile: malformed .npy files are errors naming the file", "[hostile]") {
  const std::string dir = scratch_dir("hostile_npy");
  auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string p = dir + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  auto npy = [](const std::string& header, const std::string& data) {
    std::string h = header;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h.push_back('\n');
    std::string s = std::string("\x93NUMPY\x01\x00", 8);
    s.push_back(static_cast<char>(h.size() & 0xff));
    s.push_back(static_cast<char>(h.size() >> 8));
    return s + h + data;
  };
  CHECK_THROWS_WITH(read_npy(write("magic.npy", "NOTNUMPY........")), Catch::Contains("magic.npy: not a .npy"));
  CHECK_THROWS_WITH(read_npy(write("short.npy", "\x93NUMPY")), Catch::Contains("short.npy"));
  std::string len = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "");
  len[8] = '\xff';
  len[9] = '\x7f';
  CHECK_THROWS_WITH(read_npy(write("len.npy", len)), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(read_npy(write("data.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                                   std::string(8, '\0')))),
                    Catch::Contains("needs 12 bytes, the file holds 8"));
  CHECK_THROWS_WITH(read_npy(write("neg.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", ""))),
                    Catch::Contains("bad .npy shape"));
  CHECK_THROWS_WITH(read_npy(write("type.npy", npy("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }",
                                                   std::string(16, '\0')))),
                    Catch::Contains("unsupported .npy dtype '<c16'"));
  CHECK_THROWS_WITH(read_npy(write("fortran.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
                                                      std::string(4, '\0')))),
                    Catch::Contains("Fortran"));
}

TEST_CASE("hostile: an exception inside a parallel kernel reaches the caller (no terminate)", "[hostile]") {
  // 2 threads, a large Div whose last element divides by zero.
  ModelBuilder b;
  b.input("a", kInt32, {1 << 16}).input("b", kInt32, {1 << 16}).output("y", kInt32, {1 << 16});
  b.node("Div", {"a", "b"}, {"y"}, "div");
  const std::string path = save(b, "hostile_parallel_error");
  SessionOptions o;
  o.threads = 2;
  Session s(load_onnx(path), default_op_registry(), o);
  Tensor a = Tensor::allocate(DType::I32, {1 << 16}), d = Tensor::allocate(DType::I32, {1 << 16});
  for (int i = 0; i < (1 << 16); ++i) d.data<int32_t>()[i] = i == (1 << 16) - 1 ? 0 : 1;
  CHECK_THROWS_WITH(s.run({{"a", a}, {"b", d}}), Catch::Contains("division by zero"));
  for (int i = 0; i < (1 << 16); ++i) d.data<int32_t>()[i] = 2;
  CHECK_NOTHROW(s.run({{"a", a}, {"b", d}}));  // the pool is still usable
}

TEST_CASE("hostile: a genai_config.json cannot name a decoder outside its folder", "[hostile][files]") {
  namespace fs = std::filesystem;
  const std::string outside = scratch_dir("hostile_genai_outside");
  ModelBuilder::write_file(outside + "/model.onnx", "not read");
  const std::string dir = scratch_dir("hostile_genai");
  const auto locate_error = [&](const std::string& filename) {
    ModelBuilder::write_file(dir + "/genai_config.json",
                             R"({"model": {"decoder": {"filename": ")" + filename + R"("}}})");
    try {
      (void)locate_model(dir, "");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    FAIL("located a decoder named '" << filename << "'");
    return std::string();
  };
  CHECK_THAT(locate_error("../hostile_genai_outside/model.onnx"), Catch::Contains("'..'"));
  CHECK_THAT(locate_error(outside + "/model.onnx"), Catch::Contains("absolute"));
  fs::remove(dir + "/link.onnx");
  fs::create_symlink(outside + "/model.onnx", dir + "/link.onnx");
  CHECK_THAT(locate_error("link.onnx"), Catch::Contains("outside") && Catch::Contains("genai_config.json"));
  ModelBuilder::write_file(dir + "/inside.onnx", "found, not read");
  ModelBuilder::write_file(dir + "/genai_config.json", R"({"model": {"decoder": {"filename": "inside.onnx"}}})");
  CHECK(locate_model(dir, "").model == dir + "/inside.onnx");
}

TEST_CASE("hostile: a side file past its bound is an error naming it, not an allocation", "[hostile][files]") {
  const std::string dir = scratch_dir("hostile_side_files");
  ModelBuilder::write_file(dir + "/model.onnx", "not read");
  // 64 MiB of spaces and then an object: valid JSON, one byte per space.
  const std::string big = std::string(size_t{64} << 20, ' ') + "{}";
  ModelBuilder::write_file(dir + "/config.json", big);
  CHECK_THROWS_WITH(read_model_files(dir + "/model.onnx"),
                    Catch::Contains(dir + "/config.json") && Catch::Contains("more than 67108864 bytes"));
  ModelBuilder::write_file(dir + "/config.json", big.substr(big.size() - 1000));
  CHECK(read_model_files(dir + "/model.onnx").max_positions == 0);
}

TEST_CASE("hostile: an empty broadcast output runs no loop (was 3.6e8 empty runs: minutes)", "[hostile][regression]") {
  // Found by fuzz_onnx: Equal of [1] and [1, 3, 14719, 8191, 0] looped once
  // per index of the non-empty dims.
  const BroadcastPlan plan({{1}, {1, 3, 14719, 8191, 0}}, {1, 3, 14719, 8191, 0});
  CHECK(plan.outer() == 0);
  CHECK(BroadcastPlan({{int64_t{1} << 40, 1, 0}, {1, int64_t{1} << 40, 1}}, {int64_t{1} << 40, int64_t{1} << 40, 0})
            .outer() == 0);  // the other dims' product (2^80) is never formed
  ModelBuilder b;
  b.initializer<int64_t>("a", kInt64, {1}, {1});
  b.initializer<int64_t>("e", kInt64, {1, 3, 14719, 8191, 0}, {});
  b.input("x", kInt64, {1}).output("y", 9, {1, 3, 14719, 8191, 0});
  b.node("Add", {"x", "e"}, {"s"});
  b.node("Equal", {"s", "a"}, {"y"});
  Tensor x = Tensor::allocate(DType::I64, {1});
  x.data<int64_t>()[0] = 1;
  const auto y = run(save(b, "hostile_empty_broadcast"), {{"x", x}});
  CHECK(y[0].shape() == Shape{1, 3, 14719, 8191, 0});
  CHECK(y[0].size() == 0);
}

TEST_CASE("hostile: Range to an infinite limit in the wrong direction is empty (was -inf cast to int64)",
          "[hostile][regression]") {
  ModelBuilder b;
  b.initializer<float>("s", kFloat, {}, {0.0f});
  b.initializer<float>("l", kFloat, {}, {-std::numeric_limits<float>::infinity()});
  b.initializer<float>("d", kFloat, {}, {1.0f});
  b.input("x", kFloat, {1}).output("y", kFloat, {0});
  b.node("Range", {"s", "l", "d"}, {"r"});
  b.node("Add", {"r", "x"}, {"y"});
  Tensor x = Tensor::allocate(DType::F32, {1});
  x.data<float>()[0] = 1;
  const auto y = run(save(b, "hostile_range_inf"), {{"x", x}});
  CHECK(y[0].shape() == Shape{0});
  // The right direction is too long: an error, not a wrapped count.
  ModelBuilder c;
  c.initializer<float>("s", kFloat, {}, {0.0f});
  c.initializer<float>("l", kFloat, {}, {std::numeric_limits<float>::infinity()});
  c.initializer<float>("d", kFloat, {}, {1.0f});
  c.input("x", kFloat, {1}).output("y", kFloat, {-1});
  c.node("Range", {"s", "l", "d"}, {"r"});
  c.node("Add", {"r", "x"}, {"y"});
  CHECK_THAT(error_of(save(c, "hostile_range_inf_long"), {{"x", x}}), Catch::Contains("too long"));
}
