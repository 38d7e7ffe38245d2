// The real Qwen3 tokenizer on any bytes: encode, decode, the stream decoder,
// and decode of arbitrary ids. Bytes that are not UTF-8 are repaired as
// Hugging Face does; nothing may crash.
#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onebit;
  static const Tokenizer tok = Tokenizer::load(ONEBIT_SOURCE_DIR "/../shared/models/qwen3/tokenizer.json");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean([&] {
    const std::vector<int32_t> ids = tok.encode(text, size % 2 == 0);
    const std::string back = tok.decode(ids);
    StreamDecoder stream(tok, size % 3 == 0);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    // Ids made of the bytes themselves, in and out of range.
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 4 <= size; i += 4) {
      int32_t v;
      std::memcpy(&v, data + i, 4);
      raw.push_back(v);
    }
    (void)tok.decode(raw, true);
  });
  return 0;
}
