// The loader against bad input: every case is a clear onebit::Error naming
// the file and the tensor, node or value, never a crash or a read outside
// the file. Also: views and external data on valid files.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/proc_status.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/session.h"
#include "model_builder.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7;

// A valid model: y = x + w, w a [2,3] float initializer.
ModelBuilder add_model() {
  ModelBuilder b;
  b.input("x", kFloat, {2, 3}).output("y", kFloat, {2, 3});
  b.initializer<float>("w", kFloat, {2, 3}, {1, 2, 3, 4, 5, 6});
  b.node("Add", {"x", "w"}, {"y"}, "add");
  return b;
}

// The loader's message for `path`, failing the test if it loads.
std::string load_error(const std::string& path) {
  try {
    load_onnx(path);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected " << path << " to be rejected");
  return {};
}

std::string save(const ModelBuilder& b, const std::string& dir, const std::string& name = "model.onnx") {
  const std::string path = dir + "/" + name;
  b.save(path);
  return path;
}

}  // namespace

TEST_CASE("loader: a valid model loads and runs", "[loader]") {
  const std::string dir = scratch_dir("loader_valid");
  Session s(load_onnx(save(add_model(), dir)), default_op_registry());
  Tensor x = Tensor::allocate(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = float(i);
  auto out = s.run({{"x", x}});
  REQUIRE(out.size() == 1);
  for (int i = 0; i < 6; ++i) CHECK(out[0].data<float>()[i] == float(2 * i + 1));
}

TEST_CASE("loader: empty file", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_empty");
  ModelBuilder::write_file(dir + "/empty.onnx", "");
  const std::string msg = load_error(dir + "/empty.onnx");
  CHECK_THAT(msg, Catch::Contains("empty.onnx") && Catch::Contains("empty"));
}

TEST_CASE("loader: garbage file", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_garbage");
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>((i * 7919 + 13) % 251));
  ModelBuilder::write_file(dir + "/junk.onnx", junk);
  CHECK_THAT(load_error(dir + "/junk.onnx"), Catch::Contains("junk.onnx") && Catch::Contains("not"));
  ModelBuilder::write_file(dir + "/text.onnx", "hello, this is not a model\n");
  CHECK_THAT(load_error(dir + "/text.onnx"), Catch::Contains("text.onnx"));
}

TEST_CASE("loader: truncated file", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_truncated");
  const std::string full = add_model().bytes();
  for (size_t cut : {full.size() / 2, full.size() - 1, size_t{3}}) {
    ModelBuilder::write_file(dir + "/cut.onnx", full.substr(0, cut));
    CHECK_THAT(load_error(dir + "/cut.onnx"), Catch::Contains("cut.onnx"));
  }
}

TEST_CASE("loader: tensor data size disagrees with shape x dtype", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_size");
  ModelBuilder b;
  b.input("x", kFloat, {2, 3}).output("y", kFloat, {2, 3});
  b.initializer<float>("w", kFloat, {2, 3}, {1, 2, 3, 4, 5});  // 5 floats for 6
  b.node("Add", {"x", "w"}, {"y"});
  const std::string msg = load_error(save(b, dir));
  CHECK_THAT(msg, Catch::Contains("'w'") && Catch::Contains("24 bytes") && Catch::Contains("20"));
}

TEST_CASE("loader: negative dims", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_negdim");
  ModelBuilder b = add_model();
  b.graph().mutable_initializer(0)->set_dims(0, -2);
  CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'w'") && Catch::Contains("negative") && Catch::Contains("-2"));
}

TEST_CASE("loader: overflowing dims", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_overflow");
  ModelBuilder b = add_model();
  auto* w = b.graph().mutable_initializer(0);
  w->clear_dims();
  for (int i = 0; i < 4; ++i) w->add_dims(int64_t{1} << 20);  // 2^80 elements
  CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'w'") && Catch::Contains("overflow"));
}

TEST_CASE("loader: a huge declared tensor with no data is rejected before allocating", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_huge");
  ModelBuilder b = add_model();
  auto* w = b.graph().mutable_initializer(0);
  w->clear_dims();
  w->add_dims(int64_t{1} << 40);  // 4 TiB of float
  w->clear_raw_data();
  // Had the loader tried to allocate 4 TiB it would have failed with
  // bad_alloc, not with the size check below.
  const std::string msg = load_error(save(b, dir));
  CHECK_THAT(msg, Catch::Contains("'w'") && Catch::Contains("4398046511104 bytes"));
}

TEST_CASE("loader: unknown data type", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_dtype");
  ModelBuilder b = add_model();
  b.graph().mutable_initializer(0)->set_data_type(99);
  CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'w'") && Catch::Contains("data type 99"));
  ModelBuilder c = add_model();
  c.graph().mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(77);
  CHECK_THAT(load_error(save(c, dir)), Catch::Contains("'x'") && Catch::Contains("77"));
}

TEST_CASE("loader: external data is memory-mapped and checked", "[loader][external]") {
  const std::string dir = scratch_dir("loader_external");
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::string blob(16, '\0');  // an offset to prove it is honoured
  blob.append(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  ModelBuilder::write_file(dir + "/weights.bin", blob);
  ModelBuilder b = add_model();
  ModelBuilder::external(*b.graph().mutable_initializer(0), "weights.bin", "16", "24");

  SECTION("valid") {
    Session s(load_onnx(save(b, dir)), default_op_registry());
    Tensor x = Tensor::allocate(DType::F32, {2, 3});
    auto out = s.run({{"x", x}});
    for (int i = 0; i < 6; ++i) CHECK(out[0].data<float>()[i] == w[static_cast<size_t>(i)]);
  }
  SECTION("missing file") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "nothere.bin", "0", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'w'") && Catch::Contains("nothere.bin") &&
                                             Catch::Contains("does not exist"));
  }
  SECTION("absolute path") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "/etc/passwd", "0", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("/etc/passwd") && Catch::Contains("absolute"));
  }
  SECTION("escaping with ..") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "../loader_external/weights.bin", "16", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("..") && Catch::Contains("leaves"));
  }
  SECTION("symlink leading out") {
    const std::string outside = scratch_dir("loader_external_outside");
    ModelBuilder::write_file(outside + "/secret.bin", blob);
    fs::create_symlink(outside + "/secret.bin", dir + "/link.bin");
    ModelBuilder::external(*b.graph().mutable_initializer(0), "link.bin", "16", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("link.bin") && Catch::Contains("outside"));
  }
  SECTION("too short") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "weights.bin", "32", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("weights.bin") && Catch::Contains("exceeds"));
  }
  SECTION("offset past the end") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "weights.bin", "1000", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("offset 1000") && Catch::Contains("past the end"));
  }
  SECTION("offset + length overflowing 64 bits") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "weights.bin", "16", "18446744073709551615");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("exceeds"));
    ModelBuilder::external(*b.graph().mutable_initializer(0), "weights.bin", "99999999999999999999999", "24");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("offset"));
  }
  SECTION("length disagreeing with the shape") {
    ModelBuilder::external(*b.graph().mutable_initializer(0), "weights.bin", "16", "20");
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'w'") && Catch::Contains("24 bytes"));
  }
}

TEST_CASE("loader: a model over 2 GB loads through external data", "[loader][external]") {
  // A sparse 2.5 GB weight file: mapped, never read in full, so the test
  // costs no disk and little time.
  const std::string dir = scratch_dir("loader_big");
  const int64_t n = (int64_t{5} << 30) / 8;  // 671M floats = 2.5 GiB
  {
    std::ofstream f(dir + "/big.bin", std::ios::binary);
  }
  REQUIRE(::truncate((dir + "/big.bin").c_str(), n * 4) == 0);
  ModelBuilder b;
  b.input("i", kInt64, {1}).output("y", kFloat, {1});
  auto& w = b.initializer("w", kFloat, {n}, nullptr, 0);
  ModelBuilder::external(w, "big.bin", "0", std::to_string(n * 4));
  b.node("Gather", {"w", "i"}, {"y"});
  Graph g = load_onnx(save(b, dir));
  CHECK(g.value(g.find_value("w")).constant->bytes() == static_cast<size_t>(n) * 4);
  Session s(std::move(g), default_op_registry());
  Tensor i = Tensor::allocate(DType::I64, {1});
  i.data<int64_t>()[0] = n - 1;
  auto out = s.run({{"i", i}});
  CHECK(out[0].data<float>()[0] == 0.0f);
}

TEST_CASE("loader: a node reading an undefined value", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_undefined");
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Add", {"x", "ghost"}, {"y"}, "the_add");
  CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'the_add'") && Catch::Contains("'ghost'"));
}

TEST_CASE("loader: a cycle", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_cycle");
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Add", {"x", "c"}, {"a"}, "first");
  b.node("Relu", {"a"}, {"c"}, "second");
  b.node("Relu", {"a"}, {"y"}, "third");
  CHECK_THAT(load_error(save(b, dir)), Catch::Contains("cycle") && Catch::Contains("'first'") &&
                                           Catch::Contains("'second'"));
}

TEST_CASE("loader: two nodes writing one name", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_twice");
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("Relu", {"x"}, {"y"}, "one");
  b.node("Neg", {"x"}, {"y"}, "two");
  CHECK_THAT(load_error(save(b, dir)), Catch::Contains("'two'") && Catch::Contains("'y'") && Catch::Contains("'one'"));
}

TEST_CASE("loader: an unknown op loads as a placeholder and running lists every unsupported op", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_unknown_op");
  ModelBuilder b;
  b.input("x", kFloat, {2}).output("y", kFloat, {2});
  b.node("FrobnicateA", {"x"}, {"a"}, "f1");
  b.node("Add", {"a", "a"}, {"b"}, "ok");
  b.node("FrobnicateB", {"b"}, {"c"}, "f2");
  b.node("FrobnicateA", {"c"}, {"y"}, "f3");
  Graph g = load_onnx(save(b, dir));  // inspect works on it
  CHECK(g.nodes.size() == 4);
  try {
    Session s(std::move(g), default_op_registry());
    FAIL("a session with unknown ops must not be created");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("3 node(s)") && Catch::Contains("FrobnicateA (opset 21) x2") &&
                        Catch::Contains("FrobnicateB (opset 21) x1") && Catch::Contains("'f1'"));
  }
}

TEST_CASE("loader: an unsupported opset", "[loader][bad-input]") {
  const std::string dir = scratch_dir("loader_opset");
  // 13 up to the newest opset the pinned onnx defines (graph/opsets.h).
  for (int64_t opset : {12, 28}) {
    ModelBuilder b = add_model();
    b.proto().mutable_opset_import(0)->set_version(opset);
    CHECK_THAT(load_error(save(b, dir)), Catch::Contains("opset ai.onnx " + std::to_string(opset)) &&
                                             Catch::Contains("13 to 27"));
  }
  ModelBuilder none = add_model();
  none.proto().clear_opset_import();
  CHECK_THAT(load_error(save(none, dir)), Catch::Contains("imports no ai.onnx opset"));
}

TEST_CASE("loader: initializers are views, not copies", "[loader]") {
  const std::string dir = scratch_dir("loader_views");
  std::vector<float> w(1 << 16, 1.5f);
  ModelBuilder b;
  b.input("x", kFloat, {1}).output("y", kFloat, {1});
  b.initializer<float>("w", kFloat, {1 << 16}, w);
  auto& fd = *b.graph().add_initializer();  // typed field rather than raw_data
  fd.set_name("v");
  fd.set_data_type(kFloat);
  fd.add_dims(3);
  for (float f : {1.f, 2.f, 3.f}) fd.add_float_data(f);
  b.node("Add", {"x", "x"}, {"y"});
  const Graph g = load_onnx(save(b, dir));
  const Tensor& tw = *g.value(g.find_value("w")).constant;
  const Tensor& tv = *g.value(g.find_value("v")).constant;
  CHECK(tw.data<float>()[100] == 1.5f);
  CHECK(tv.data<float>()[2] == 3.f);
  // The large raw_data is viewed in the mapped file itself (protobuf's copy
  // freed); the typed field is viewed in the parsed model. No per-tensor copy.
  REQUIRE(g.mapped.size() == 1);
  const auto* p = static_cast<const uint8_t*>(tw.raw());
  CHECK(range_inside(p, tw.bytes(), g.mapped[0].data, g.mapped[0].size));
  CHECK(tv.owner() == g.keep_alive.front());
}

namespace {

// This process's resident pages of file mappings, in bytes (/proc/self/status RssFile).
size_t rss_file_bytes() {
  const std::optional<int64_t> kib = proc_status_kib("RssFile");
  REQUIRE(kib);
  return static_cast<size_t>(*kib) << 10;
}

}  // namespace

// A float weight whose raw_data sits at an offset no float may be read at
// is copied into aligned storage; the mapped pages it was copied from go
// back to the page cache as it is copied, so the weight is resident once
// (the copy), not twice. The initializer's name moves the payload until
// one lands at an odd offset.
TEST_CASE("loader: a weight at an odd offset is copied once, its mapped pages given back", "[loader][mapped]") {
  constexpr int64_t kFloats = int64_t{8} << 20;  // 32 MiB
  std::vector<float> w(static_cast<size_t>(kFloats));
  for (int64_t i = 0; i < kFloats; ++i) w[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 0.5f;
  bool copied = false;
  for (const std::string name : {"w", "wa", "wab", "wabc"}) {
    ModelBuilder b;
    b.input("x", kFloat, {1}).output("y", kFloat, {1});
    b.initializer<float>(name, kFloat, {kFloats}, w);
    b.node("Add", {"x", "x"}, {"y"});
    const std::string path = save(b, scratch_dir("loader_odd_" + name));
    const size_t before = rss_file_bytes();
    const Graph g = load_onnx(path);
    const size_t after = rss_file_bytes();
    const Tensor& t = *g.value(g.find_value(name)).constant;
    REQUIRE(g.mapped.size() == 1);
    const auto* p = static_cast<const uint8_t*>(t.raw());
    if (range_inside(p, t.bytes(), g.mapped[0].data, g.mapped[0].size)) continue;  // aligned: a view
    copied = true;
    INFO("name " << name << ": resident file pages " << before << " -> " << after << " bytes");
    CHECK(reinterpret_cast<uintptr_t>(p) % alignof(float) == 0);
    CHECK(t.data<float>()[0] == 0.0f);
    CHECK(t.data<float>()[kFloats - 1] == static_cast<float>((kFloats - 1) % 1000) * 0.5f);
    CHECK(after < before + (size_t{4} << 20));  // not the 32 MiB read through the mapping
    break;
  }
  CHECK(copied);
}

// advise_random_reads (base/mapped_file.h) on a file whose pages were
// dropped from the page cache: touching one byte reads about that page,
// where a plain mapping of the same file reads the read-ahead window.
TEST_CASE("advise_random_reads: a cold page read from a marked mapping reads that page alone", "[loader][mapped]") {
  const std::string path = test::scratch_dir("random_reads") + "/table.bin";
  constexpr size_t kBytes = size_t{64} << 20;
  {
    std::vector<char> data(kBytes, 7);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(std::fwrite(data.data(), 1, data.size(), f) == data.size());
    std::fflush(f);
    REQUIRE(::fsync(fileno(f)) == 0);  // clean pages, which DONTNEED drops
    std::fclose(f);
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  ::close(fd);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), pages = kBytes / page;
  const auto marked = MappedFile::open(path), plain = MappedFile::open(path);
  auto resident = [&] {
    std::vector<unsigned char> in(pages);
    REQUIRE(::mincore(const_cast<uint8_t*>(plain->data()), kBytes, in.data()) == 0);
    size_t n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
  };
  const size_t cold = resident();
  advise_random_reads(marked->data(), kBytes);
  volatile uint8_t sink = marked->data()[kBytes / 4 + 100];
  const size_t after_marked = resident();
  sink = plain->data()[3 * kBytes / 4 + 100];  // far from the first: its own window
  (void)sink;
  const size_t after_plain = resident();
  const size_t read_marked = after_marked - cold, read_plain = after_plain - after_marked;
  INFO("pages read: marked " << read_marked << ", plain " << read_plain << " (" << cold << " resident before)");
  // What this test can tell depends on where the scratch file lives: a file
  // system whose pages cannot be dropped (tmpfs) or a device that reads
  // ahead no more than a few pages shows no difference to measure.
  if (cold != 0 || read_plain <= 16) {
    WARN("the scratch file system keeps the pages or barely reads ahead (" << cold << " resident after DONTNEED, "
         << read_plain << " pages a plain fault read): advise_random_reads not measured here");
  } else {
    CHECK(read_marked >= 1);
    CHECK(read_marked <= 16);
    CHECK(read_plain > 2 * read_marked);
  }
  std::remove(path.c_str());
}

namespace {

// y = If(n > 2): then a Constant node [1, 2, 3], else an initializer [7, 8]
// (the branches differ in shape, as a LongRoPE model's rotary caches do);
// `else_reads_x` makes the else branch compute from the outer graph instead.
// With `on_shape` the condition is x's length > 2 instead of n > 2: known
// when planning, so the If is planned with its outputs held.
ModelBuilder if_model(bool else_reads_x = false, bool on_shape = false) {
  ModelBuilder b;
  b.input("n", kInt64, {}).input("x", kFloat, {-1}).output("y", kFloat, {-1});
  b.initializer<int64_t>("two", kInt64, {1}, {2});
  if (on_shape) b.node("Shape", {"x"}, {"length"}, "length");
  b.node("Greater", {on_shape ? "length" : "n", "two"}, {"cond"}, "greater");
  onnx::NodeProto& n = b.node("If", {"cond"}, {"y"}, "if");
  auto branch = [&](const char* name) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->set_name(name);
    return a->mutable_g();
  };
  onnx::GraphProto* then_g = branch("then_branch");
  onnx::NodeProto* c = then_g->add_node();
  c->set_op_type("Constant");
  c->set_name("three");
  c->add_output("a");
  onnx::AttributeProto* v = c->add_attribute();
  v->set_name("value");
  v->set_type(onnx::AttributeProto::TENSOR);
  v->mutable_t()->set_data_type(kFloat);
  v->mutable_t()->add_dims(3);
  for (float f : {1.f, 2.f, 3.f}) v->mutable_t()->add_float_data(f);
  then_g->add_output()->set_name("a");
  onnx::GraphProto* else_g = branch("else_branch");
  if (else_reads_x) {
    onnx::NodeProto* add = else_g->add_node();
    add->set_op_type("Add");
    add->set_name("outer_add");
    add->add_input("x");
    add->add_input("x");
    add->add_output("b");
  } else {
    onnx::TensorProto* t = else_g->add_initializer();
    t->set_name("b");
    t->set_data_type(kFloat);
    t->add_dims(2);
    for (float f : {7.f, 8.f}) t->add_float_data(f);
  }
  else_g->add_output()->set_name("b");
  return b;
}

}  // namespace

TEST_CASE("loader: an If on constant branches runs the branch its condition picks", "[loader][if]") {
  for (bool on_shape : {false, true}) {
    INFO((on_shape ? "the condition known when planning" : "the condition known at run time"));
    const std::string dir = scratch_dir("loader_if");
    Session s(load_onnx(save(if_model(false, on_shape), dir)), default_op_registry());
    auto run = [&](int64_t n) {
      Tensor t = Tensor::allocate(DType::I64, {});
      *t.data<int64_t>() = n;
      Tensor x = Tensor::allocate(DType::F32, {n});
      return s.run({{"n", t}, {"x", x}}).at(0);
    };
    Tensor a = run(5);
    REQUIRE(a.shape() == Shape{3});
    CHECK((a.data<float>()[0] == 1 && a.data<float>()[1] == 2 && a.data<float>()[2] == 3));
    a.data<float>()[0] = -1;  // the caller's copy, not the branch's constant
    const Tensor b = run(1);
    REQUIRE(b.shape() == Shape{2});
    CHECK((b.data<float>()[0] == 7 && b.data<float>()[1] == 8));
    const Tensor again = run(3);
    REQUIRE(again.shape() == Shape{3});
    CHECK(again.data<float>()[0] == 1);
  }
}

TEST_CASE("loader: an If whose branch computes is refused, naming what the branch holds", "[loader][if][bad-input]") {
  const std::string dir = scratch_dir("loader_if_refused");
  const std::string path = save(if_model(/*else_reads_x=*/true), dir);
  try {
    Session s(load_onnx(path), default_op_registry());
    FAIL("expected the If to be refused");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("else_branch") != std::string::npos);
    CHECK(what.find("'outer_add' is Add") != std::string::npos);
    CHECK(what.find("'if'") != std::string::npos);
  }
}

TEST_CASE("range_inside: a view of a mapping, at its edges and past them", "[loader]") {
  alignas(64) static uint8_t region[256];
  CHECK(range_inside(region, 256, region, 256));
  CHECK(range_inside(region + 255, 1, region, 256));
  CHECK(range_inside(region + 256, 0, region, 256));
  CHECK(range_inside(region + 100, 0, region, 256));
  CHECK_FALSE(range_inside(region + 255, 2, region, 256));
  CHECK_FALSE(range_inside(region + 1, 256, region, 256));
  CHECK_FALSE(range_inside(region + 10, SIZE_MAX, region, 256));  // no wrap-around
  CHECK_FALSE(range_inside(region, 16, region + 1, 255));         // starts before
  CHECK_FALSE(range_inside(nullptr, 0, region, 256));
  CHECK_FALSE(range_inside(region, 0, nullptr, 256));
}
