// tokenizer.json documents (models/tokenizer/): any JSON, any model,
// normalizer, pre-tokenizer, decoder and added-token settings.
#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  fuzz::expect_clean([&] {
    const Tokenizer t = Tokenizer::parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    const std::vector<int32_t> ids = t.encode("Hello, world! 你好 <|im_start|>  \n\t x");
    (void)t.decode(ids);
    (void)t.decode({0, 1, 2, -1, 1 << 30});
  });
  return 0;
}
