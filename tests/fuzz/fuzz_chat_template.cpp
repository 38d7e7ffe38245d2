// Chat templates (models/chat.h) from tokenizer_config.json: any template
// text, any user and system message.
#include "models/chat.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  const std::string all(reinterpret_cast<const char*>(data), size);
  // template \x00 user \x00 system
  const size_t a = all.find('\0'), b = a == std::string::npos ? a : all.find('\0', a + 1);
  const std::string tmpl = all.substr(0, a);
  const std::string user = a == std::string::npos ? "hi" : all.substr(a + 1, b == std::string::npos ? b : b - a - 1);
  const std::string system = b == std::string::npos ? "" : all.substr(b + 1);
  fuzz::expect_clean([&] { (void)apply_chat_template(tmpl, user, system, "fuzz"); });
  return 0;
}
