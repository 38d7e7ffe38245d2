// A Hugging Face tokenizer.json, run natively: byte-level BPE tokenizers
// (GPT-2, SmolLM2, Qwen) give the same ids as the Python `tokenizers`
// library. The pipeline, as in HF:
//
//   bytes --(invalid UTF-8 -> U+FFFD)--> text
//        --added tokens (raw)--> pieces --normalizer--> --added tokens (normalized)-->
//        --pre_tokenizer--> words --BPE--> ids --post_processor--> ids
//
// HF's Python API only takes str; bytes that are not UTF-8 are repaired here
// exactly as bytes.decode("utf-8", "replace") would, so encode(bytes) equals
// HF's encode of the repaired string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace onebit {

class Tokenizer {
 public:
  // Reads and checks a tokenizer.json. Throws onebit::Error naming `path` and
  // what is wrong ("tokenizer.json: model.merges[12]: ...").
  static Tokenizer load(const std::string& path);
  // The same from the file's contents; `name` stands in for the path in errors.
  static Tokenizer parse(std::string_view json, const std::string& name);

  // split_special == false encodes special tokens' text literally (HF's
  // encode_special_tokens); non-special added tokens still split.
  // add_special applies the post-processor's template (e.g. a BOS id), as
  // HF's encode(text, add_special_tokens=True) does.
  std::vector<int32_t> encode(std::string_view text, bool split_special = true, bool add_special = true) const;

  // Unknown ids are skipped, as in HF. Invalid UTF-8 in the decoded bytes
  // becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  std::string id_to_token(int32_t id) const;          // "" if absent
  // One past the largest id (HF get_vocab_size(with_added_tokens=True) when
  // ids are dense, as they are in real tokenizers).
  size_t vocab_size() const;
  bool is_special(int32_t id) const;

  struct Impl;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  // Appends the bytes `id` decodes to (nothing for skipped or unknown ids);
  // `first` tracks whether a token has been emitted yet.
  void append_bytes(int32_t id, bool skip_special, bool& first, std::string& out) const;

  std::shared_ptr<const Impl> impl_;
};

// Decodes ids one at a time for streaming output. push() returns only whole
// UTF-8 characters: bytes of a character split across tokens wait for the
// rest. Concatenating every push() and the final flush() gives exactly
// decode() of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  std::string push(int32_t id);
  // The bytes still waiting, each incomplete sequence as one U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace onebit
