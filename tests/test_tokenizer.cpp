// The tokenizer (models/tokenizer/tokenizer.h) piece by piece, on malformed files, on
// 1 MB inputs, in streaming decode, and — in the hidden [parity] case that
// tests/python_tests.cmake runs — against HF tokenizers' ids on a corpus.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/tokenizer/added_tokens.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/byte_level.h"
#include "models/tokenizer/normalizer.h"
#include "models/tokenizer/pretokenizer.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/utf8.h"

using namespace onebit;

namespace {

const std::string kQwenPath = ONEBIT_SOURCE_DIR "/../shared/models/qwen3/tokenizer.json";

const Tokenizer& qwen() {
  static const Tokenizer t = [] {
    if (!std::ifstream(kQwenPath)) FAIL("missing " << kQwenPath << " (the real Qwen3 tokenizer, see DESIGN.md)");
    return Tokenizer::load(kQwenPath);
  }();
  return t;
}

std::vector<int32_t> repeat(int32_t id, size_t n) { return std::vector<int32_t>(n, id); }

// A tokenizer.json around a BPE model; `model_extra`, `top_extra` are spliced
// in as JSON members.
std::string tiny_json(const std::string& vocab, const std::string& merges, const std::string& model_extra = "",
                      const std::string& top_extra = "") {
  return fmt::format(R"({{"version": "1.0", {} "model": {{"type": "BPE", "vocab": {}, "merges": {} {}}}}})",
                     top_extra.empty() ? "" : top_extra + ",", vocab, merges,
                     model_extra.empty() ? "" : "," + model_extra);
}

std::string load_error(const std::string& json, const std::string& name = "bad.json") {
  try {
    Tokenizer::parse(json, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded without error)";
}

std::vector<std::pair<size_t, size_t>> spans_of(const std::vector<std::pair<size_t, size_t>>& r) { return r; }

}  // namespace

// ---- UTF-8 ----

TEST_CASE("invalid UTF-8 becomes one U+FFFD per maximal subpart, as Python's errors='replace'", "[tokenizer][utf8]") {
  const std::string R = utf8::kReplacement;
  // Expected values are bytes.decode("utf-8", "replace") in CPython.
  CHECK(utf8::lossy("\xF0\x9F\x98") == R);
  CHECK(utf8::lossy("\xE4\xB8" "a") == R + "a");
  CHECK(utf8::lossy("\xC0\xAF") == R + R);
  CHECK(utf8::lossy("\xED\xA0\x80") == R + R + R);
  CHECK(utf8::lossy("\xF4\x90\x80\x80") == R + R + R + R);
  CHECK(utf8::lossy("\xE0\x80\xAF") == R + R + R);
  CHECK(utf8::lossy("a\x80\x80" "b") == "a" + R + R + "b");
  CHECK(utf8::lossy("\xFF") == R);
  CHECK(utf8::lossy("ok \xC3\xA9 \xF0\x9F\x98\x80") == "ok \xC3\xA9 \xF0\x9F\x98\x80");
  CHECK(utf8::is_valid(std::string("a\0b", 3)));
  CHECK_FALSE(utf8::is_valid("\xED\xA0\x80"));
}

TEST_CASE("streaming lossy decoding holds back a truncated character", "[tokenizer][utf8]") {
  std::string out;
  CHECK(utf8::append_lossy("ab\xF0\x9F", out, false) == 2);
  CHECK(out == "ab");
  out.clear();
  CHECK(utf8::append_lossy("\xF0\x9F\x98\x80", out, false) == 4);
  CHECK(out == "\xF0\x9F\x98\x80");
  out.clear();
  // A byte that can never continue the sequence settles it at once.
  CHECK(utf8::append_lossy("\xF0\x9F" "a", out, false) == 3);
  CHECK(out == std::string(utf8::kReplacement) + "a");
}

// ---- byte-level alphabet ----

TEST_CASE("byte-level alphabet: GPT-2 stand-ins, round trip of all 256 bytes", "[tokenizer][byte_level]") {
  CHECK(byte_level::char_for(' ') == "\xC4\xA0");   // 'Ġ'
  CHECK(byte_level::char_for('\n') == "\xC4\x8A");  // 'Ċ'
  CHECK(byte_level::char_for('a') == "a");
  CHECK(byte_level::char_for(0xAD) == "\xC5\x83");  // the last stand-in, U+0143
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string spelled, back;
  byte_level::encode(all, spelled);
  REQUIRE(byte_level::decode(spelled, back));
  CHECK(back == all);
  back.clear();
  CHECK_FALSE(byte_level::decode("\xE6\x97\xA5", back));  // '日' is not a stand-in
  CHECK(back.empty());
}

// ---- regex ----

TEST_CASE("Oniguruma patterns translate to PCRE2 with the same meaning", "[tokenizer][regex]") {
  CHECK(translate_oniguruma(R"(\s+(?!\S))") == R"(\p{White_Space}+(?!\P{White_Space}))");
  CHECK(translate_oniguruma(R"((?m:a.b)(?i:'s))") == R"((?s:a.b)(?i:'s))");
  CHECK(translate_oniguruma(R"(\h)") == "[0-9a-fA-F]");
  CHECK(translate_oniguruma(R"(\[\s)") == R"(\[\p{White_Space})");
  const std::string in_class = translate_oniguruma(R"([^\s\p{L}])");
  CHECK(in_class.rfind(R"([^\p{White_Space}\p{L}\x{1C89}-\x{1C8A})", 0) == 0);
  CHECK(in_class.back() == ']');
}

TEST_CASE("regex classes follow HF's Oniguruma, not PCRE2's defaults", "[tokenizer][regex]") {
  // U+0085 is White_Space (Oniguruma's \s) but not PCRE2's \s.
  CHECK(Regex::compile(R"(\s)").find_all("a\xC2\x85" "b") == spans_of({{1, 3}}));
  // Kawi U+11F04 (Unicode 15) is a letter to HF; PCRE2 10.42 stops at 14.
  CHECK(Regex::compile(R"(\p{L}+)").find_all("1\xF0\x91\xBC\x84" "1") == spans_of({{1, 5}}));
  // Caseless 's also matches U+017F LONG S, as in Oniguruma.
  CHECK(Regex::compile(R"((?i:'s))").find_all("'\xC5\xBF") == spans_of({{0, 3}}));
  // '^' is a line anchor in Ruby syntax.
  CHECK(Regex::compile("^b").find_all("ab\nb") == spans_of({{3, 4}}));
  // Empty matches: one at the start, none right after a match (Oniguruma's find_iter).
  CHECK(Regex::compile("a*").find_all("baa") == spans_of({{0, 0}, {1, 3}}));
  CHECK(Regex::literal("a.").find_all("a.ba.") == spans_of({{0, 2}, {3, 5}}));
  CHECK_THROWS_WITH(Regex::compile("(unclosed"), Catch::Contains("(unclosed") && Catch::Contains("missing closing"));
}

// ---- pre-tokenizer ----

TEST_CASE("split behaviors match HF's split.rs examples", "[tokenizer][pretokenizer]") {
  // HF pre_tokenizers/split.rs `basic`: "How are you doing?" split on
  // \w+|[^\w\s]+ with invert = true.
  const std::string text = "How are you doing?";
  const auto matches = Regex::compile(R"(\w+|[^\w\s]+)").find_all(text);
  const auto pieces = [&](SplitBehavior b) {
    std::vector<std::string> out;
    for (const auto& [s, e] : split_ranges(matches, text.size(), b, true)) out.push_back(text.substr(s, e - s));
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(pieces(SplitBehavior::Removed) == V{"How", "are", "you", "doing", "?"});
  CHECK(pieces(SplitBehavior::Isolated) == V{"How", " ", "are", " ", "you", " ", "doing", "?"});
  CHECK(pieces(SplitBehavior::MergedWithPrevious) == V{"How ", "are ", "you ", "doing", "?"});
  CHECK(pieces(SplitBehavior::MergedWithNext) == V{"How", " are", " you", " doing", "?"});
  CHECK(pieces(SplitBehavior::Contiguous) == V{"How", " ", "are", " ", "you", " ", "doing?"});
}

TEST_CASE("ByteLevel pre-tokenizer: GPT-2 split, byte spelling, prefix space", "[tokenizer][pretokenizer]") {
  PreTokenizer p;
  p.add_byte_level({true, true});
  std::vector<std::string> words;
  p.run("Hello world's  end\n", words);
  using V = std::vector<std::string>;
  CHECK(words == V{"\xC4\xA0Hello", "\xC4\xA0world", "'s", "\xC4\xA0", "\xC4\xA0" "end", "\xC4\x8A"});
}

// ---- normalizer ----

TEST_CASE("normalizer: NFC composes, NFKC folds compatibility forms, NUL survives", "[tokenizer][normalizer]") {
  Normalizer nfc;
  nfc.add(NormalForm::NFC);
  CHECK(nfc.apply("e\xCC\x81") == "\xC3\xA9");
  CHECK(nfc.apply("\xE2\x84\xAB") == "\xC3\x85");  // ANGSTROM SIGN -> Å
  CHECK(nfc.apply(std::string("a\0e\xCC\x81", 5)) == std::string("a\0\xC3\xA9", 4));
  CHECK(nfc.apply("\xEF\xAC\x81") == "\xEF\xAC\x81");  // 'ﬁ' is NFC already
  Normalizer nfkc;
  nfkc.add(NormalForm::NFKC);
  CHECK(nfkc.apply("\xEF\xAC\x81") == "fi");
  CHECK(Normalizer().apply("e\xCC\x81") == "e\xCC\x81");
}

TEST_CASE("normalizer leaves alone what HF's older Unicode tables do not know", "[tokenizer][normalizer]") {
  Normalizer nfc, nfd, nfkc;
  nfc.add(NormalForm::NFC);
  nfd.add(NormalForm::NFD);
  nfkc.add(NormalForm::NFKC);
  // U+0898 has combining class 230 in utf8proc, none to HF: no reordering.
  CHECK(nfc.apply("a\xE0\xA2\x98\xCC\x96") == "a\xE0\xA2\x98\xCC\x96");
  // The runs on either side still normalize.
  CHECK(nfc.apply("e\xCC\x81\xE0\xA2\x98" "e\xCC\x81") == "\xC3\xA9\xE0\xA2\x98\xC3\xA9");
  // U+11935 U+11930 compose to U+11938 in utf8proc only; HF does not decompose U+11938.
  CHECK(nfc.apply("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0") == "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
  CHECK(nfd.apply("\xF0\x91\xA4\xB8") == "\xF0\x91\xA4\xB8");
  // U+32FF SQUARE ERA NAME REIWA has no compatibility decomposition to HF.
  CHECK(nfkc.apply("\xE3\x8B\xBF") == "\xE3\x8B\xBF");
}

// ---- BPE ----

TEST_CASE("BPE merges the lowest rank first, leftmost on ties", "[tokenizer][bpe]") {
  BpeConfig c;
  c.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"aa", 3}, {"bc", 4}, {"abc", 5}, {"ab", 6}};
  c.merges = {{"b", "c"}, {"a", "a"}, {"a", "bc"}, {"a", "b"}};
  const Bpe bpe(c);
  const auto ids = [&](std::string_view w) {
    std::vector<int32_t> out;
    bpe.tokenize(w, out);
    return out;
  };
  CHECK(ids("aaa") == std::vector<int32_t>{3, 0});
  CHECK(ids("abc") == std::vector<int32_t>{5});     // b c (rank 0) before a b (rank 3)
  CHECK(ids("aabc") == std::vector<int32_t>{3, 4});  // a a (1) before a bc (2)
  CHECK(ids("ab") == std::vector<int32_t>{6});
}

TEST_CASE("BPE unknown characters: unk, fuse_unk, byte_fallback as HF", "[tokenizer][bpe]") {
  // Expected ids are HF tokenizers 0.23.3's on the same model.
  const auto run = [](bool unk, bool fuse, bool fallback, bool byte_token, std::string_view text) {
    BpeConfig c;
    c.vocab = {{"a", 0}, {"b", 1}, {"<unk>", 2}};
    if (byte_token) c.vocab.push_back({"<0x78>", 3});
    if (unk) c.unk_token = "<unk>";
    c.fuse_unk = fuse;
    c.byte_fallback = fallback;
    std::vector<int32_t> out;
    Bpe(c).tokenize(text, out);
    return out;
  };
  using V = std::vector<int32_t>;
  CHECK(run(false, false, false, false, "axxbyy") == V{0, 1});
  CHECK(run(true, false, false, false, "axxbyy") == V{0, 2, 2, 1, 2, 2});
  CHECK(run(true, true, false, false, "axxbyy") == V{0, 2, 1, 2});
  CHECK(run(true, true, true, true, "axxbyy") == V{0, 3, 3, 1, 2});
  // HF pushes byte tokens before a pending unk.
  CHECK(run(true, true, true, true, "yxa") == V{3, 2, 0});
  CHECK(run(true, true, true, true, "yyxya") == V{3, 2, 0});
}

TEST_CASE("BPE ignore_merges, continuing_subword_prefix and end_of_word_suffix as HF", "[tokenizer][bpe]") {
  BpeConfig c;
  c.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"abcabc", 6}};
  c.merges = {{"a", "b"}, {"b", "c"}, {"ab", "c"}};
  c.ignore_merges = true;
  std::vector<int32_t> out;
  Bpe(c).tokenize("abcabc", out);
  CHECK(out == std::vector<int32_t>{6});
  out.clear();
  Bpe(c).tokenize("abcab", out);
  CHECK(out == std::vector<int32_t>{5, 3});

  BpeConfig p;
  p.vocab = {{"a", 0}, {"##b", 1}, {"##c</w>", 2}, {"ab", 3}, {"abc</w>", 4}, {"c</w>", 5}, {"a</w>", 6}};
  p.merges = {{"a", "##b"}, {"ab", "##c</w>"}};
  p.continuing_subword_prefix = "##";
  p.end_of_word_suffix = "</w>";
  const Bpe bpe(p);
  out.clear();
  bpe.tokenize("abc", out);
  CHECK(out == std::vector<int32_t>{4});
  out.clear();
  bpe.tokenize("a", out);
  CHECK(out == std::vector<int32_t>{6});
}

// ---- added tokens ----

TEST_CASE("added tokens: leftmost-longest, single_word, lstrip, rstrip, encode_special", "[tokenizer][added]") {
  const auto token = [](int32_t id, std::string content, bool single_word, bool lstrip, bool rstrip, bool special) {
    AddedToken t;
    t.id = id;
    t.content = std::move(content);
    t.single_word = single_word;
    t.lstrip = lstrip;
    t.rstrip = rstrip;
    t.normalized = false;
    t.special = special;
    return t;
  };
  AddedVocabulary v;
  v.build({token(10, "<mask>", true, false, false, true), token(11, "<s>", false, true, true, true),
           token(12, "<s>x", false, false, false, false), token(13, "[SEP]", false, false, true, true),
           token(14, "special", false, false, false, true)},
          [](const std::string& s) { return s; });
  const auto show = [&](std::string_view text, bool split_special = true) {
    std::vector<std::string> out;
    for (const AddedSpan& s : v.split(text, false, split_special)) {
      out.push_back((s.id >= 0 ? fmt::format("#{}:", s.id) : "") + std::string(text.substr(s.start, s.end - s.start)));
    }
    return out;
  };
  using V = std::vector<std::string>;
  // HF's test_single_word_is_correct, without the lowercasing normalizer.
  CHECK(show("<mask> My name <mask> A<mask> <mask>ony <mask>") ==
        V{"#10:<mask>", " My name ", "#10:<mask>", " A<mask> <mask>ony ", "#10:<mask>"});
  CHECK(show("a  <s>  b") == V{"a", "#11:  <s>  ", "b"});
  CHECK(show("a<s>xb") == V{"a", "#12:<s>x", "b"});
  CHECK(show("x[SEP] \n y") == V{"x", "#13:[SEP] \n ", "y"});
  CHECK(show("a special b", false) == V{"a special b"});
  CHECK(show("a <s>x b", false) == V{"a ", "#12:<s>x", " b"});
}

// ---- the Qwen3 tokenizer ----

TEST_CASE("Qwen3: ids, special tokens, vocabulary queries", "[tokenizer][qwen3]") {
  const Tokenizer& t = qwen();
  // Reference ids from HF tokenizers 0.23.3.
  CHECK(t.encode("h\xC3\xA9llo \xF0\x9F\x98\x80 <|im_start|>user\n<think>hi</think><|endoftext|>") ==
        std::vector<int32_t>{71, 18503, 385, 90316, 220, 151644, 872, 198, 151667, 6023, 151668, 151643});
  CHECK(t.encode("").empty());
  CHECK(t.vocab_size() == 151669);
  CHECK(t.token_to_id("<|im_start|>") == 151644);
  CHECK(t.token_to_id("\xC4\xA0the") == 279);
  CHECK(t.token_to_id("no such token") == -1);
  CHECK(t.id_to_token(151644) == "<|im_start|>");
  CHECK(t.id_to_token(279) == "\xC4\xA0the");
  CHECK(t.id_to_token(-3).empty());
  CHECK(t.id_to_token(999999).empty());
  CHECK(t.is_special(151643));
  CHECK_FALSE(t.is_special(151667));  // <think> is added but not special
  CHECK_FALSE(t.is_special(279));
}

TEST_CASE("Qwen3: special tokens can be encoded literally, added non-special ones still split",
          "[tokenizer][qwen3]") {
  const Tokenizer& t = qwen();
  const auto literal = t.encode("<|im_start|><think>", false);
  CHECK(std::find(literal.begin(), literal.end(), 151644) == literal.end());
  CHECK(literal.back() == 151667);
  CHECK(t.decode(literal) == "<|im_start|><think>");
}

TEST_CASE("Qwen3: decode round-trips NFC text and skips special tokens on request", "[tokenizer][qwen3]") {
  const Tokenizer& t = qwen();
  for (const std::string s : {"Hello, world!", "  two  spaces\t\ttabs\n\n",
                              "\xE4\xB8\xAD\xE6\x96\x87 and \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
                              "I'M sure it's fine", "x = [1, 2, 3]  # comment", "\xC3\xA9t\xC3\xA9"}) {
    CHECK(t.decode(t.encode(s)) == s);
  }
  CHECK(t.decode(t.encode("e\xCC\x81")) == "\xC3\xA9");  // NFC
  const auto ids = t.encode("<|im_start|>user\nhi<|im_end|>");
  CHECK(t.decode(ids) == "<|im_start|>user\nhi<|im_end|>");
  CHECK(t.decode(ids, true) == "user\nhi");
  CHECK(t.decode({279, -1, 99999999, 1879}) == " the world");
}

TEST_CASE("Qwen3: invalid UTF-8 input is encoded as its U+FFFD repair", "[tokenizer][qwen3]") {
  const Tokenizer& t = qwen();
  CHECK(t.encode("abc\xFF" "def") == t.encode("abc\xEF\xBF\xBD" "def"));
  CHECK(t.encode("\xF0\x9F\x98") == t.encode("\xEF\xBF\xBD"));
  CHECK(t.encode("<|im_start|>\xC0\xAF") == t.encode("<|im_start|>\xEF\xBF\xBD\xEF\xBF\xBD"));
}

// ---- 1 MB of one character class: a single 1 MB pre-token ----

TEST_CASE("Qwen3: 1 MB of 'a' is one pre-token and encodes as HF does", "[tokenizer][qwen3][large]") {
  // HF: 125000 x 69440 ("aaaaaaaa").
  CHECK(qwen().encode(std::string(1000000, 'a')) == repeat(69440, 125000));
}

TEST_CASE("Qwen3: 1 MB of spaces encodes as HF does", "[tokenizer][qwen3][large]") {
  // HF: 7812 x 56940 (128 spaces) and 5238 (the last 64).
  auto expected = repeat(56940, 7812);
  expected.push_back(5238);
  CHECK(qwen().encode(std::string(1000000, ' ')) == expected);
}

TEST_CASE("Qwen3: 1 MB of one CJK character encodes as HF does", "[tokenizer][qwen3][large]") {
  std::string text;
  for (int i = 0; i < 333333; ++i) text += "\xE4\xB8\xAD";  // '中'
  CHECK(qwen().encode(text) == repeat(15946, 333333));
}

TEST_CASE("Qwen3: 1 MB of digits, newlines and mixed text round-trips", "[tokenizer][qwen3][large]") {
  const Tokenizer& t = qwen();
  const std::string digits(1000000, '7');
  CHECK(t.encode(digits).size() == digits.size());  // Qwen splits digits one by one
  const std::string newlines(1000000, '\n');
  CHECK(t.decode(t.encode(newlines)) == newlines);
  std::string mixed;
  while (mixed.size() < 1000000) mixed += "word \xE4\xB8\xAD\xE6\x96\x87 123\t\n! ";
  CHECK(t.decode(t.encode(mixed)) == mixed);
}

// ---- streaming decode ----

TEST_CASE("StreamDecoder returns whole characters only, then what decode() returns", "[tokenizer][stream]") {
  const Tokenizer& t = qwen();
  // U+1F600 fed one byte token at a time.
  std::vector<int32_t> ids;
  for (const char b : std::string("\xF0\x9F\x98\x80")) ids.push_back(t.token_to_id(byte_level::char_for(uint8_t(b))));
  ids.push_back(t.token_to_id("a"));
  StreamDecoder s(t);
  CHECK(s.push(ids[0]).empty());
  CHECK(s.push(ids[1]).empty());
  CHECK(s.push(ids[2]).empty());
  CHECK(s.push(ids[3]) == "\xF0\x9F\x98\x80");
  CHECK(s.push(ids[4]) == "a");
  CHECK(s.flush().empty());

  // A sequence that breaks off: U+FFFD once the next byte shows it, or at flush.
  StreamDecoder broken(t);
  CHECK(broken.push(ids[0]).empty());
  CHECK(broken.push(ids[1]).empty());
  CHECK(broken.push(ids[4]) == std::string(utf8::kReplacement) + "a");
  CHECK(broken.push(ids[0]).empty());
  CHECK(broken.flush() == utf8::kReplacement);
}

TEST_CASE("StreamDecoder concatenation equals decode() on text whose tokens split characters",
          "[tokenizer][stream]") {
  const Tokenizer& t = qwen();
  const std::string text =
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\xA0\x80\x80\xF0\xAA\x9A\xA5 "
      "\xE1\x84\x80\xE1\x85\xA1 <|im_end|> Z\xCD\x91\xCC\xA3" "a\xCD\x92 \xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7";
  const auto ids = t.encode(text);
  for (const bool skip : {false, true}) {
    StreamDecoder s(t, skip);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = s.push(id);
      CHECK(utf8::is_valid(piece));
      CHECK(piece.find(utf8::kReplacement) == std::string::npos);
      streamed += piece;
    }
    streamed += s.flush();
    CHECK(streamed == t.decode(ids, skip));
  }
}

// ---- loading errors ----

TEST_CASE("tokenizer.json errors name the file and what is wrong", "[tokenizer][errors]") {
  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  CHECK_THAT(load_error("{not json"), Catch::StartsWith("bad.json: not valid JSON"));
  CHECK_THAT(load_error("[1, 2]"), Catch::Contains("bad.json: top level: expected an object, got an array"));
  CHECK_THAT(load_error(R"({"version": "1.0"})"), Catch::Contains("bad.json: top level: missing \"model\""));
  CHECK_THAT(load_error(R"({"model": []})"), Catch::Contains("bad.json: model: expected an object, got an array"));
  CHECK_THAT(load_error(tiny_json("[]", "[]")), Catch::Contains("model.vocab: expected an object, got an array"));
  CHECK_THAT(load_error(tiny_json(R"({"a": "zero"})", "[]")),
             Catch::Contains("model.vocab[\"a\"]: expected an integer id"));
  CHECK_THAT(load_error(tiny_json(vocab, R"(["a x"])")),
             Catch::Contains("model.merges[0] ('a' 'x'): 'x' is not in the vocabulary"));
  CHECK_THAT(load_error(tiny_json(R"({"a": 0, "b": 1})", R"([["a", "b"]])")),
             Catch::Contains("the merged token 'ab' is not in the vocabulary"));
  CHECK_THAT(load_error(tiny_json(vocab, R"(["ab"])")),
             Catch::Contains("model.merges[0]: merge \"ab\" is not two tokens"));
  CHECK_THAT(load_error(tiny_json(vocab, R"([["a"]])")),
             Catch::Contains("model.merges[0]: a merge must have 2 tokens"));
  CHECK_THAT(load_error(tiny_json(vocab, R"([[1, 2]])")), Catch::Contains("model.merges[0][0]: expected a string"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", R"("dropout": 0.1)")), Catch::Contains("model.dropout"));
  CHECK_THAT(load_error(R"({"model": {"type": "WordPiece", "vocab": {}}})"),
             Catch::Contains("model: model type 'WordPiece' is not supported"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "", R"("normalizer": {"type": "Lowercase"})")),
             Catch::Contains("normalizer: normalizer type 'Lowercase' is not supported"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "",
                                  R"("normalizer": {"type": "Sequence",
                                                    "normalizers": [{"type": "NFC"}, {"type": "Strip"}]})")),
             Catch::Contains("normalizer.normalizers[1]: normalizer type 'Strip'"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "", R"("pre_tokenizer": {"type": "Metaspace"})")),
             Catch::Contains("pre_tokenizer: pre-tokenizer type 'Metaspace' is not supported"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "",
                                  R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"},
                                                       "behavior": "Isolated"})")),
             Catch::Contains("pre_tokenizer.pattern: regex '(a'"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "",
                                  R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"},
                                                       "behavior": "Sideways"})")),
             Catch::Contains("pre_tokenizer.behavior: unknown split behavior 'Sideways'"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "", R"("added_tokens": [{"id": 5}])")),
             Catch::Contains("added_tokens[0]: missing \"content\""));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "", R"("decoder": {"type": "WordPiece"})")),
             Catch::Contains("decoder: decoder type 'WordPiece' is not supported"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "", R"("post_processor": {"type": "BertProcessing"})")),
             Catch::Contains("post-processor type 'BertProcessing' is not supported"));
  CHECK_THAT(load_error(tiny_json(vocab, "[]", "", R"("truncation": {"max_length": 8})")),
             Catch::Contains("truncation: is set"));
  CHECK_THAT(load_error(tiny_json(R"({"a": 0, "b": 0})", "[]")), Catch::Contains("id 0 is given to both"));
}

TEST_CASE("Tokenizer::load names a missing file", "[tokenizer][errors]") {
  CHECK_THROWS_WITH(Tokenizer::load("/nonexistent/tokenizer.json"),
                    Catch::Contains("/nonexistent/tokenizer.json") && Catch::Contains("cannot open"));
}

TEST_CASE("a tiny tokenizer.json with \"a b\" merges, a template and no decoder", "[tokenizer]") {
  const Tokenizer t = Tokenizer::parse(
      tiny_json(R"({"<s>": 0, "a": 1, "b": 2, "ab": 3, "c": 4})", R"(["a b"])", R"("unk_token": null)",
                R"("added_tokens": [{"id": 0, "content": "<s>", "special": true}],
                   "post_processor": {"type": "TemplateProcessing",
                     "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                     "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}})"),
      "tiny.json");
  CHECK(t.encode("abc") == std::vector<int32_t>{0, 3, 4});
  CHECK(t.encode("abc", true, false) == std::vector<int32_t>{3, 4});
  CHECK(t.decode({0, 3, 4}) == "<s> ab c");  // no decoder: HF joins tokens with spaces
  CHECK(t.decode({0, 3, 4}, true) == "ab c");
  CHECK(t.vocab_size() == 5);
}

// ---- the CLI ----

TEST_CASE("1bit tokenize encodes stdin and decodes ids", "[tokenizer][cli]") {
  const auto run = [](const std::string& args) {
    const std::string cmd = std::string(ONEBIT_CLI) + " tokenize --tokenizer " + kQwenPath + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    return std::make_pair(status, out);
  };
  CHECK(run("--text 'Hello world<|im_end|>'") == std::make_pair(0, std::string("[9707, 1879, 151645]\n")));
  CHECK(run("--no-special --text '<|im_end|>'").second != "[151645]\n");
  CHECK(run("--decode --text '[9707, 1879, 151645]'") == std::make_pair(0, std::string("Hello world<|im_end|>")));
  CHECK(run("--decode --skip-special --text '9707 1879 151645'").second == "Hello world");
  const auto bad = run("--decode --text 'x'");
  CHECK(bad.first != 0);
  CHECK_THAT(bad.second, Catch::Contains("'x' is not a token id"));
}

// ---- parity with HF tokenizers (run by tests/python_tests.cmake) ----

namespace {

std::string hex_to_bytes(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::vector<int32_t> id_list(simdjson::dom::element e) {
  std::vector<int32_t> ids;
  for (const auto v : e.get_array()) ids.push_back(static_cast<int32_t>(int64_t(v)));
  return ids;
}

std::string show(const std::vector<int32_t>& ids) { return fmt::format("[{}]", fmt::join(ids, ", ")); }

// Long id lists shown around their first difference, with the text the
// shown ids decode to.
std::pair<std::string, std::string> show_difference(const Tokenizer& t, const std::vector<int32_t>& expected,
                                                    const std::vector<int32_t>& got) {
  if (expected.size() + got.size() <= 64) return {show(expected), show(got)};
  size_t i = 0;
  while (i < expected.size() && i < got.size() && expected[i] == got[i]) ++i;
  const size_t from = i > 4 ? i - 4 : 0;
  const auto window = [&](const std::vector<int32_t>& ids) {
    const std::vector<int32_t> part(ids.begin() + std::min(from, ids.size()),
                                    ids.begin() + std::min(i + 12, ids.size()));
    return fmt::format("[{} of {}: {}...] {:?}", from, ids.size(), fmt::join(part, ", "), t.decode(part));
  };
  return {window(expected), window(got)};
}

}  // namespace

TEST_CASE("parity with HF tokenizers on the reference corpus", "[.][parity]") {
  const char* reference = std::getenv("ONEBIT_TOKENIZER_REFERENCE");
  if (!reference) FAIL("ONEBIT_TOKENIZER_REFERENCE is not set; tests/python_tests.cmake sets it");
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.load(reference).get(root)) {
    FAIL(reference << " is missing or unreadable; it is written by scripts/tokenizer_corpus.py reference "
                   << "(needs the venv: run scripts/setup.sh)");
  }
  const std::string tokenizer_path{std::string_view(root["tokenizer"])};
  const Tokenizer t = Tokenizer::load(tokenizer_path);

  size_t compared = 0, mismatches = 0;
  const auto report = [&](const char* what, std::string_view text, const std::string& expected,
                          const std::string& got) {
    ++mismatches;
    if (mismatches <= 40) {
      std::printf("MISMATCH %s\n  text:     %s\n  expected: %s\n  got:      %s\n", what,
                  fmt::format("{:?}", text).c_str(), expected.c_str(), got.c_str());
    }
  };
  const simdjson::dom::array cases = root["cases"];
  for (const simdjson::dom::element c : cases) {
    const std::string_view text = c["text"];
    std::string input(text);
    if (std::string_view hex; !c["bytes_hex"].get(hex)) input = hex_to_bytes(hex);
    const auto ids = id_list(c["ids"]);
    simdjson::dom::element literal_e;
    const auto literal = c["ids_literal"].get(literal_e) ? ids : id_list(literal_e);
    const std::string_view decoded = c["decoded"];
    std::string_view decoded_skip;
    if (c["decoded_skip"].get(decoded_skip)) decoded_skip = decoded;
    ++compared;

    if (const auto got = t.encode(input); got != ids) {
      const auto [e, g] = show_difference(t, ids, got);
      report("encode", text, e, g);
    }
    if (const auto got = t.encode(input, false); got != literal) {
      const auto [e, g] = show_difference(t, literal, got);
      report("encode (special as text)", text, e, g);
    }
    if (const auto got = t.decode(ids); got != decoded) {
      report("decode", text, fmt::format("{:?}", decoded), fmt::format("{:?}", got));
    }
    if (const auto got = t.decode(ids, true); got != decoded_skip) {
      report("decode (skip special)", text, fmt::format("{:?}", decoded_skip), fmt::format("{:?}", got));
    }
    StreamDecoder stream(t);
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != decoded) report("stream decode", text, fmt::format("{:?}", decoded), fmt::format("{:?}", streamed));
  }
  std::printf("%s: compared %zu strings (encode, encode with special tokens as text, decode, decode skipping "
              "special tokens, stream decode); %zu mismatches\n",
              tokenizer_path.c_str(), compared, mismatches);
  CHECK(compared >= 2000);
  CHECK(mismatches == 0);
}
