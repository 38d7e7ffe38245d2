"""onnxruntime-genai's builds of the other architectures its builder takes
(scripts/genai_models.py archs: tiny random Qwen3, Qwen2, Mistral, Phi-3,
Phi-3 with LongRoPE (an If picks the rotary caches; the sequence outgrows
the original 16 positions mid-run), Phi-2 and Nemotron (LayerNorm:
SkipLayerNormalization; partial rotary), Gemma, Gemma 2 with its sliding window
of 32 and soft caps, Granite with its multipliers): `1bit ort-run` on each folder against onnxruntime-genai's own
greedy generator, 32 steps after a 7-token prompt (past Gemma 2's window).
fp32: every token equal, and each step's logits within float rounding of
onnxruntime-genai's (mean KL <= 1e-6; its generator's logits, not plain
onnxruntime's: onnxruntime's GroupQueryAttention refuses a local window
larger than the cache buffer it is given, which onnxruntime-genai sizes);
int4: the generators part only at a near tie (test_genai.py's bound).

  pytest scripts/tests/test_genai_archs.py --onebit build/1bit --genai-archs build/models/genai-archs
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import parity
from onebit_tools import SCRIPTS
from test_genai import PROMPTS, STEPS, TIE, genai_generate

ARCHS = [a for a, o in json.loads((SCRIPTS / "configs" / "genai-archs.json").read_text()).items()
         if not a.startswith("_") and o.get("_genai", True)]


def folder(config, arch: str, build: str) -> Path:
    return Path(config.getoption("genai_archs")) / arch / f"genai-{build}"


@pytest.mark.parametrize("build", ["fp32", "int4"])
@pytest.mark.parametrize("arch", ARCHS)
def test_arch_tokens(onebit, pytestconfig, tmp_path, arch, build):
    d = folder(pytestconfig, arch, build)
    logits, got, prompt_ids = parity.run_onebit(onebit, str(d / "model.onnx"), ["--prompt", PROMPTS[0]], STEPS, [],
                                                str(tmp_path / "onebit.npy"))
    ours = [int(t) for t in got]
    ids, theirs, ref = genai_generate(d, PROMPTS[0])
    print(f"{arch} {build}\n1bit:              {ours}\nonnxruntime-genai: {theirs}")
    assert [int(t) for t in prompt_ids] == ids, "the tokenizers disagree on the prompt"
    part = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if part is None:
        assert len(ours) == len(theirs), f"1bit made {len(ours)} steps, onnxruntime-genai {len(theirs)}"
    else:
        margin = float(logits[part][ours[part]] - logits[part][theirs[part]])
        print(f"they part at step {part} (1bit's margin {margin:.4f})")
        assert margin <= TIE[build], f"the generators part at step {part} where 1bit's margin is {margin:.4f}"
    if build == "fp32":
        s = parity.compare(ref, np.array(theirs), logits, got)
        print(parity.report(f"{arch}_vs_onnxruntime_genai", s))
        assert s["top1"] == 1.0 and s["mean_kl"] <= 1e-6
