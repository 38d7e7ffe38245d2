#include "models/tokenizer/tokenizer.h"

#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/utf8.h"

namespace onebit {

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool split_special, bool add_special) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::lossy(text);
    text = repaired;
  }

  std::vector<int32_t> ids;
  std::vector<std::string> words;
  const auto encode_piece = [&](std::string_view piece) {
    words.clear();
    m.pre_tokenizer.run(piece, words);
    for (const std::string& w : words) m.model->tokenize(w, ids);
  };
  // Raw added tokens come out of the input first; each piece between them is
  // normalized on its own, then split on the normalized added tokens (HF
  // AddedVocabulary::extract_and_normalize).
  for (const AddedSpan& raw : m.added.split(text, false, split_special)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    if (raw.end == raw.start) continue;
    const std::string normalized = m.normalizer.apply(text.substr(raw.start, raw.end - raw.start));
    const std::string_view n = normalized;
    for (const AddedSpan& span : m.added.split(n, true, split_special)) {
      if (span.id >= 0) {
        ids.push_back(span.id);
      } else if (span.end > span.start) {
        encode_piece(n.substr(span.start, span.end - span.start));
      }
    }
  }

  if (!add_special || m.post_template.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + 4);
  for (const TemplatePiece& piece : m.post_template) {
    const std::vector<int32_t>& part = piece.is_sequence ? ids : piece.ids;
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void Tokenizer::append_bytes(int32_t id, bool skip_special, bool& first, std::string& out) const {
  const Impl& m = *impl_;
  const std::string* token = nullptr;
  if (const AddedToken* added = m.added.by_id(id)) {
    if (skip_special && added->special) return;
    token = &added->spelling;
  } else {
    token = m.model->id_to_token(id);
    if (!token) return;
  }
  switch (m.decoder) {
    case DecoderKind::ByteLevel:
      // A token with characters outside the byte-level alphabet (an added
      // token like "日本") stands for its own UTF-8 bytes (HF ByteLevel
      // decode_chain).
      if (!byte_level::decode(*token, out)) out += *token;
      break;
    case DecoderKind::Join:
      if (!first) out += ' ';
      out += *token;
      break;
  }
  first = false;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) append_bytes(id, skip_special, first, bytes);
  return utf8::lossy(bytes);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* added = impl_->added.by_content(token)) return added->id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = impl_->added.by_id(id)) return added->spelling;
  const std::string* token = impl_->model->id_to_token(id);
  return token ? *token : std::string();
}

size_t Tokenizer::vocab_size() const { return size_t(impl_->max_id + 1); }

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* added = impl_->added.by_id(id);
  return added && added->special;
}

std::string StreamDecoder::push(int32_t id) {
  tokenizer_.append_bytes(id, skip_special_, first_, pending_);
  std::string out;
  const size_t used = utf8::append_lossy(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace onebit
