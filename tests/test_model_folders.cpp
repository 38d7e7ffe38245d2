// locate_model on folders: which .onnx file a folder given to ort-run,
// bench or inspect resolves to. Files only (nothing is loaded), so the
// layouts are laid out with placeholder files.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "model_builder.h"
#include "models/model_files.h"

namespace onebit {
namespace {

using test::ModelBuilder;
using test::scratch_dir;

std::string folder_of(const std::string& name, const std::vector<std::string>& files) {
  const std::string dir = scratch_dir(name);
  for (const std::string& f : files) ModelBuilder::write_file(dir + "/" + f, "placeholder, not read");
  return dir;
}

std::string locate_error(const std::string& dir, const std::string& variant) {
  try {
    (void)locate_model(dir, variant);
  } catch (const Error& e) {
    return e.what();
  }
  return "(located)";
}

TEST_CASE("model folder: the exporter's pair defaults to the graph with the KV cache", "[files][folder]") {
  const std::string dir = folder_of("folder_pair", {"model.onnx", "model-cached.onnx", "model-cached-q4.onnx",
                                                    "tokenizer.json"});
  const ModelLocation loc = locate_model(dir, "");
  CHECK(loc.model == dir + "/model-cached.onnx");
  CHECK(loc.layout == "folder");
  CHECK(loc.side_dir == dir);
  CHECK(loc.variants == std::vector<std::string>{"cached-q4", "cached", "fp32"});  // by file name
  // Each still reachable by its variant.
  CHECK(locate_model(dir, "fp32").model == dir + "/model.onnx");
  CHECK(locate_model(dir, "cached").model == dir + "/model-cached.onnx");
  CHECK(locate_model(dir, "cached-q4").model == dir + "/model-cached-q4.onnx");
}

TEST_CASE("model folder: model.onnx is the default beside other variants", "[files][folder]") {
  const std::string dir = folder_of("folder_fp32", {"model.onnx", "model_q4.onnx", "model_fp16.onnx"});
  CHECK(locate_model(dir, "").model == dir + "/model.onnx");
  CHECK(locate_model(dir, "q4").model == dir + "/model_q4.onnx");
}

TEST_CASE("model folder: one file is the default whatever its name", "[files][folder]") {
  const std::string dir = folder_of("folder_one", {"decoder.onnx", "config.json"});
  CHECK(locate_model(dir, "").model == dir + "/decoder.onnx");
}

TEST_CASE("model folder: several without a default ask for --variant, listing them", "[files][folder]") {
  const std::string dir = folder_of("folder_several", {"model_q4.onnx", "model_fp16.onnx"});
  const std::string e = locate_error(dir, "");
  CHECK_THAT(e, Catch::Contains("several models") && Catch::Contains("--variant fp16, q4"));
  CHECK_THAT(locate_error(dir, "int8"), Catch::Contains("no variant 'int8'") && Catch::Contains("fp16, q4"));
}

TEST_CASE("model folder: the onnx/ subfolder keeps model.onnx as its default", "[files][folder]") {
  const std::string dir = folder_of("folder_tjs", {"tokenizer.json", "config.json"});
  std::filesystem::create_directories(dir + "/onnx");
  for (const char* f : {"model.onnx", "model_q4.onnx"}) ModelBuilder::write_file(dir + "/onnx/" + f, "placeholder");
  const ModelLocation loc = locate_model(dir, "");
  CHECK(loc.model == dir + "/onnx/model.onnx");
  CHECK(loc.layout == "onnx/");
  CHECK(loc.side_dir == dir);
}

}  // namespace
}  // namespace onebit
