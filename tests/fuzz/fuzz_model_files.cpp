// The side files of a model folder (models/model_files.h): config.json,
// generation_config.json, tokenizer_config.json, chat_template.jinja,
// genai_config.json — split from one input at NUL bytes — read as a model
// file's side files and located as a folder (the decoder genai_config.json
// names must stay inside it).
#include <filesystem>

#include "models/model_files.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  static const char* kNames[] = {"config.json", "generation_config.json", "tokenizer_config.json",
                                 "chat_template.jinja", "genai_config.json"};
  const std::string dir = fuzz::scratch() + "/model";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  size_t start = 0, part = 0;
  for (size_t i = 0; i <= size && part < 5; ++i) {
    if (i == size || data[i] == 0) {
      const std::string path = dir + "/" + kNames[part];
      std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data + start),
                                                  static_cast<std::streamsize>(i - start));
      start = i + 1;
      ++part;
    }
  }
  fuzz::expect_clean([&] { (void)read_model_files(dir + "/model.onnx"); });
  fuzz::expect_clean([&] { (void)locate_model(dir, ""); });
  return 0;
}
