"""Exact lookup decoding (`1bit ort-run --lookup N`, models/lookup.h) through
the binary: on every graph kind the tiny exports have — uncached, cached
(the cache kept in the session and rewound over rejected drafts), A8W8 QDQ,
opset-23 Attention, onnxruntime-genai fp32 and int4 (GroupQueryAttention's
kept cache), the cached and genai fp32 ones with the cache kept in float16
— and many prompts, `--lookup 4` must choose exactly the tokens
of the plain greedy run with bit-identical logits, while drafting, refusing
drafted tokens (the cache rewound) and, where the model repeats itself,
keeping them.

  pytest scripts/tests/test_lookup.py --onebit build/1bit --tiny build/models/qwen3-tiny --genai build/models/genai-tiny
"""
from __future__ import annotations

import json
import random
import subprocess

import numpy as np
import pytest

from conftest import tiny

STEPS = 24
LOOKUP = 4


def prompts(vocab: int) -> list[list[int]]:
    """Prompts that repeat themselves (drafts from the prompt) and random ones."""
    rng = random.Random(5)
    out = []
    for i in range(10):
        motif = [rng.randrange(3, vocab) for _ in range(2 + i % 4)]
        out.append(motif * (2 + i % 3) + motif[: i % 3])
    for i in range(6):
        out.append([rng.randrange(3, vocab) for _ in range(3 + 2 * i)])
    return out


def run(onebit: str, model, ids: list[int], lookup: int, dump, extra: tuple = ()) -> tuple[dict, np.ndarray]:
    cmd = [onebit, "ort-run", str(model), "--prompt-ids", ",".join(map(str, ids)), "-n", str(STEPS),
           "--lookup", str(lookup), "--json", "--dump-logits", str(dump), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{p.stderr}"
    return json.loads(p.stdout), np.load(dump)


def graphs(pytestconfig):
    t = tiny(pytestconfig)
    genai = pytestconfig.getoption("genai")
    return {
        "uncached": t / "model.onnx",
        "cached": t / "model-cached.onnx",
        "cached-qdq": t / "model-cached-qdq-quark.onnx",
        "cached-op23": t / "model-cached-op23.onnx",
        "genai-fp32": f"{genai}/genai-fp32",
        "genai-int4": f"{genai}/genai-int4",
    }


# "+f16" / "+q8": the session keeps the cache in float16 or int8 (--kv-dtype);
# the rows a verification pass computes must still be those decode steps compute.
@pytest.mark.parametrize("kind", ["uncached", "cached", "cached-qdq", "cached-op23", "genai-fp32", "genai-int4",
                                  "cached+f16", "genai-fp32+f16", "cached+q8", "genai-fp32+q8"])
def test_lookup_is_greedy(onebit, pytestconfig, tmp_path, kind):
    kind, _, kv = kind.partition("+")
    extra = ("--kv-dtype", kv) if kv else ()
    model = graphs(pytestconfig)[kind]
    drafted = accepted = fewer = 0
    cases = prompts(200)
    # The model's own continuation quoted back to it: prompt + its greedy
    # text + prompt + that text's first two tokens. The last two tokens recur,
    # so drafts come from the quote whether or not this model repeats itself.
    for ids in cases[:4]:
        quoted, _ = run(onebit, model, ids, 0, tmp_path / "quote.npy", extra)
        cases.append(ids + quoted["generated_ids"] + ids + quoted["generated_ids"][:2])
    for i, ids in enumerate(cases):
        want, lw = run(onebit, model, ids, 0, tmp_path / f"plain{i}.npy", extra)
        got, lg = run(onebit, model, ids, LOOKUP, tmp_path / f"lookup{i}.npy", extra)
        assert want["kv_dtype"] == (got["kv_dtype"]) == {"f16": "float16", "q8": "int8", "": "float32"}[kv]
        assert got["generated_ids"] == want["generated_ids"], f"prompt {ids}: lookup parted from greedy"
        assert lg.shape == lw.shape and np.array_equal(lg.view(np.uint32), lw.view(np.uint32)), \
            f"prompt {ids}: logits differ, max |d| {np.abs(lg - lw).max()}"
        assert want["passes"] == len(want["generated_ids"]) and want["lookup"]["drafted"] == 0
        assert got["passes"] == len(got["generated_ids"]) - got["lookup"]["accepted"]
        drafted += got["lookup"]["drafted"]
        accepted += got["lookup"]["accepted"]
        fewer += got["passes"] < want["passes"]
    print(f"{kind}: {drafted} drafted, {accepted} kept, {fewer} of {len(cases)} prompts in fewer passes")
    assert drafted > accepted, "no drafted token was ever refused: the rewind was not exercised"
    # A draft is kept when the model's greedy text repeats; the tiny Qwen3
    # (a 200-token vocabulary) falls into loops, the genai builds' random
    # Llama over 151936 tokens does not, so there only refusals are certain.
    if not kind.startswith("genai"):
        assert accepted > 0, "no drafted token was ever kept: the fast path was not exercised"
