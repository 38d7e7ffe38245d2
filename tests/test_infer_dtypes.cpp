// The dtypes a file leaves undeclared, filled in (graph/passes/infer_dtypes.cpp):
// each rule on a graph with no value_info, declared dtypes kept, unknown
// ops left undeclared, copies (Casts to the same type, Identity, one-input
// Concat) removed except at a graph output.
#include <catch2/catch.hpp>

#include "base/thread_pool.h"
#include "graph/onnx/onnx_loader.h"
#include "graph/passes/passes.h"
#include "model_builder.h"
#include "ops/register_ops.h"

using namespace onebit;
using onebit::test::ModelBuilder;
using onebit::test::scratch_dir;

namespace {

constexpr int32_t kFloat = 1, kInt64 = 7, kHalf = 10;

struct Inferred {
  Graph g;
  PassReport report;
  DType of(const std::string& name) const { return g.value(g.find_value(name)).dtype; }
  bool has_op(const std::string& op) const {
    for (const Node& n : g.nodes)
      if (n.op_type == op) return true;
    return false;
  }
};

Inferred infer(const ModelBuilder& b, const std::string& name) {
  const std::string path = scratch_dir(name) + "/model.onnx";
  b.save(path);
  Inferred r{load_onnx(path), {}};
  SessionOptions options;
  ThreadPool pool(1);
  PassContext ctx{options, default_op_registry(), r.report, pool};
  infer_dtypes(r.g, ctx);
  return r;
}

}  // namespace

TEST_CASE("infer dtypes: each rule on a graph that declares only its inputs and outputs", "[pass][dtypes]") {
  ModelBuilder b;
  b.input("x", kFloat, {2, 4}).input("h", kHalf, {2, 4}).output("out", kFloat, {2, 4});
  b.initializer<int64_t>("axes", kInt64, {1}, {0});
  b.node("Sigmoid", {"x"}, {"sig"});
  b.node("MatMul", {"sig", "sig"}, {"mm"});
  b.node("Shape", {"mm"}, {"shape"});
  b.node("Unsqueeze", {"shape", "axes"}, {"unsq"});
  b.node("Less", {"x", "sig"}, {"less"});
  b.node("IsNaN", {"mm"}, {"nan"});
  b.node("Where", {"less", "h", "h"}, {"where"});  // typed as input 1
  ModelBuilder::attr_int(b.node("Cast", {"where"}, {"widened"}), "to", kFloat);
  b.node("CastLike", {"x", "h"}, {"like"});
  b.node("ConstantOfShape", {"shape"}, {"zeros"});
  b.node("Split", {"x"}, {"s0", "s1"}).add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("num_outputs");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(2);
    return a;
  }());
  b.node("Hardmax", {"x"}, {"unlisted"});  // not in the rules: stays undeclared
  b.node("Add", {"widened", "x"}, {"out"});
  const Inferred r = infer(b, "infer_rules");
  CHECK(r.of("sig") == DType::F32);
  CHECK(r.of("mm") == DType::F32);
  CHECK(r.of("shape") == DType::I64);
  CHECK(r.of("unsq") == DType::I64);
  CHECK(r.of("less") == DType::Bool);
  CHECK(r.of("nan") == DType::Bool);
  CHECK(r.of("where") == DType::F16);
  CHECK(r.of("widened") == DType::F32);
  CHECK(r.of("like") == DType::F16);
  CHECK(r.of("zeros") == DType::F32);
  CHECK(r.of("s0") == DType::F32);
  CHECK(r.of("s1") == DType::F32);
  CHECK(r.of("unlisted") == DType::Undefined);
  CHECK(r.of("out") == DType::F32);  // declared, kept
  CHECK(r.report.get("dtypes_inferred") == 12);
  CHECK(r.report.get("copies_removed") == 0);  // the one Cast widens
}

TEST_CASE("infer dtypes: a Cast to its input's type, Identity and a one-input Concat are removed, except as a graph output",
          "[pass][dtypes]") {
  ModelBuilder b;
  b.input("x", kFloat, {3}).output("y", kFloat, {3}).output("kept", kFloat, {3});
  ModelBuilder::attr_int(b.node("Cast", {"x"}, {"c1"}, "c1"), "to", kFloat);
  b.node("Neg", {"c1"}, {"n"});
  ModelBuilder::attr_int(b.node("Cast", {"n"}, {"c2"}, "c2"), "to", kFloat);  // n's type inferred first
  b.node("Add", {"c2", "c1"}, {"y"});
  ModelBuilder::attr_int(b.node("Cast", {"x"}, {"kept"}, "c3"), "to", kFloat);
  b.output("z", kFloat, {3});
  b.node("Identity", {"x"}, {"i1"}, "identity");
  ModelBuilder::attr_int(b.node("Concat", {"i1"}, {"one"}, "concat_one"), "axis", 0);
  ModelBuilder::attr_int(b.node("Concat", {"one", "x"}, {"two"}, "concat_two"), "axis", 0);  // no copy
  b.node("Identity", {"two"}, {"z"}, "identity_out");  // a graph output: kept
  const Inferred r = infer(b, "infer_casts");
  CHECK(r.report.get("copies_removed") == 4);  // c1, c2, the Identity, the one-input Concat
  CHECK(r.g.nodes.size() == 5);  // Neg, Add, c3, the two-input Concat, identity_out
  const int x = r.g.find_value("x"), n = r.g.find_value("n");
  for (const Node& node : r.g.nodes) {
    if (node.op_type == "Neg") CHECK(node.inputs[0] == x);
    if (node.op_type == "Add") CHECK((node.inputs[0] == n && node.inputs[1] == x));
    if (node.op_type == "Cast") CHECK(node.name == "c3");
    if (node.op_type == "Concat") CHECK((node.name == "concat_two" && node.inputs[0] == x && node.inputs[1] == x));
    if (node.op_type == "Identity") CHECK(node.name == "identity_out");
  }
}

TEST_CASE("infer dtypes: an unknown input type infers nothing and removes no Cast", "[pass][dtypes]") {
  ModelBuilder b;
  b.input("x", kFloat, {3}).output("y", kFloat, {3});
  b.node("Hardmax", {"x"}, {"r"});  // an op the rules leave out
  ModelBuilder::attr_int(b.node("Cast", {"r"}, {"y"}), "to", kFloat);
  const Inferred r = infer(b, "infer_unknown");
  CHECK(r.of("r") == DType::Undefined);
  CHECK(r.has_op("Cast"));
  CHECK(r.report.get("copies_removed") == 0);
}

TEST_CASE("infer dtypes: onnxruntime's quantized MatMul and Gather typed as their float operand", "[pass][dtypes]") {
  ModelBuilder b;
  auto* os = b.proto().add_opset_import();
  os->set_domain("com.microsoft");
  os->set_version(1);
  b.input("a", kFloat, {2, 32}).input("ids", kInt64, {3}).output("out", kFloat, {2, 8});
  b.initializer<uint8_t>("w", 2, {8, 1, 16}, std::vector<uint8_t>(128, 0x88));
  b.initializer<float>("ws", kFloat, {8}, std::vector<float>(8, 0.5f));
  b.initializer<uint16_t>("table_scales", kHalf, {5, 1}, std::vector<uint16_t>(5, 0x3c00));
  b.initializer<uint8_t>("table", 2, {5, 16}, std::vector<uint8_t>(80, 0x11));
  b.node("MatMulNBits", {"a", "w", "ws"}, {"mm"}).set_domain("com.microsoft");
  b.node("GatherBlockQuantized", {"table", "ids", "table_scales"}, {"rows"}).set_domain("com.microsoft");
  b.node("Gelu", {"mm"}, {"unlisted"}).set_domain("com.microsoft");  // not in the table
  b.node("Relu", {"mm"}, {"out"});
  const Inferred r = infer(b, "infer_contrib");
  CHECK(r.of("mm") == DType::F32);
  CHECK(r.of("rows") == DType::F16);
  CHECK(r.of("unlisted") == DType::Undefined);
}
