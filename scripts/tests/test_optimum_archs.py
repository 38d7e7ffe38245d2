"""Optimum 1.x's own exports (scripts/export_optimum.py, ai.onnx opset 14)
of the tiny random checkpoints of scripts/genai_models.py archs, with either
pinned stack (--optimum-stack):

  1.23  optimum 1.23.3, transformers 4.46.3: Qwen2, Mistral, Phi-3 (and
        with LongRoPE), Gemma and Phi-2 (Qwen3, Granite, Gemma 2 and Nemotron
        it refuses as unsupported architectures);
  1.27  optimum 1.27.0, transformers 4.53.3: those and Qwen3, Granite and
        SmolLM3 (NoPE layers; a checkpoint genai's builder is not asked
        for) (Gemma 2 and Nemotron it refuses).

On each, 1bit's cached greedy run chooses onnxruntime's tokens on the same
file and transformers' on the same checkpoint (mean KL <= 1e-6, top-1 on
every step), and the fusions the architecture allows reach it, the KV cache
kept in the session.

Phi-3 with LongRoPE is compared with onnxruntime only: transformers 4.x
picks the short or long factors when the graph is traced, so the file holds
one set for every length, which transformers 5 (picking per call) does not.

  pytest scripts/tests/test_optimum_archs.py --onebit build/1bit \\
      --optimum-archs build/models/optimum-archs --genai-archs build/models/genai-archs [--optimum-stack 1.27]
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import parity
from onebit_tools import cli

ARCHS = {"1.23": ["qwen2", "mistral", "phi3", "phi3-longrope", "gemma", "phi"],
         "1.27": ["qwen2", "qwen3", "mistral", "phi3", "phi3-longrope", "gemma", "granite", "phi", "smollm3"]}
PROMPT = [9707, 11, 1879, 374, 264, 1, 2, 3, 4, 5, 6, 7]  # past Phi-3 LongRoPE's 16 original positions by the end
STEPS = 24
MAX_KL = 1e-6


def paths(pytestconfig, arch: str) -> tuple[Path, Path]:
    model = Path(pytestconfig.getoption("optimum_archs")) / arch / "model.onnx"
    checkpoint = Path(pytestconfig.getoption("genai_archs")) / arch / "checkpoint"
    for p in (model, checkpoint):
        if not p.exists():
            prefix = "optimum" if pytestconfig.getoption("optimum_stack") == "1.23" else "optimum127"
            pytest.fail(f"{p} is missing: ctest's {prefix}_build_{arch} (scripts/export_optimum.py) writes it")
    return model, checkpoint


def expected_fusions(arch: str, n: int) -> dict[str, int]:
    """What each architecture's graph allows, for n layers."""
    want = {"rms_norm": 2 * n + 1, "rotary": 2 * n, "gqa": 2 * n, "scores_softmax": n, "swiglu": n}
    if arch == "qwen3":
        want["rms_norm"] = 4 * n + 1  # and the q and k norms of each layer
    if arch == "smollm3":
        want["rotary"] = 2 * (n - n // 2)  # every second layer without rotary (NoPE)
    # Phi-3: gate and up are the halves of one projection, its Slices proven equal
    if arch == "gemma":
        want["swiglu"] = 0  # GELU
    if arch == "phi":
        # LayerNorm (decomposed at opset 14), GELU, multi-head (the kv-state
        # pass makes its products GqaMatMuls); the rotary on the first half
        # of each head, sdpa's scale read through the halves' Concat
        want = {"rotary": 2 * n, "scores_softmax": n}
    return want


def check_fusions(stderr: str, arch: str, n: int) -> None:
    """The fusions expected_fusions names, as counted in a --verbose run, and the cache kept."""
    counts = cli.fused_counts(stderr)
    for name, want in expected_fusions(arch, n).items():
        assert counts.get(name, 0) == want, (name, stderr)
    assert "kv_state_refused" not in stderr, stderr


def pytest_generate_tests(metafunc):
    """The archs of the stack that wrote --optimum-archs; LongRoPE against
    onnxruntime only (module docstring)."""
    archs = ARCHS[metafunc.config.getoption("optimum_stack")]
    if "reference" in metafunc.fixturenames:
        metafunc.parametrize("arch,reference", [(a, r) for a in archs for r in ("onnxruntime", "transformers")
                                                if (a, r) != ("phi3-longrope", "transformers")])
    elif "arch" in metafunc.fixturenames:
        metafunc.parametrize("arch", archs)


def test_optimum_arch_greedy(onebit, pytestconfig, tmp_path, arch, reference):
    model, checkpoint = paths(pytestconfig, arch)
    s = parity.greedy_against(onebit, str(model), PROMPT, STEPS, reference, None, str(tmp_path / "onebit.npy"),
                              hf=str(checkpoint), extra=["--cached"])
    assert s["steps_ref"] == s["steps_1bit"]
    assert s["top1"] == 1.0, f"top-1 {s['top1'] * 100:.1f}%, first miss at step {s['first_top1_miss']}"
    assert s["mean_kl"] <= MAX_KL, f"mean KL {s['mean_kl']:.3e} > {MAX_KL:g}"


def test_optimum_arch_fusions(onebit, pytestconfig, tmp_path, arch):
    model, checkpoint = paths(pytestconfig, arch)
    n = json.loads((checkpoint / "config.json").read_text())["num_hidden_layers"]
    d = cli.ort_run(onebit, model, ["--prompt-ids", ",".join(map(str, PROMPT))], 4, tmp_path / "l.npy",
                    ["--verbose", "--cached"], env={"ONEBIT_QDQ_DEBUG": "1"}, capture_stderr=True)
    check_fusions(d.stderr, arch, n)


def test_optimum_arch_q4(onebit, pytestconfig, tmp_path, arch):
    """transformers.js' model_q4.onnx recipe on each export (MatMulNBits,
    block 32): the same fusions (Phi-3's halves proven from MatMulNBits' N),
    the cache kept, and the same tokens and logits to rounding as --basic,
    both with float activations (with accuracy_level 4's int8 activations a
    last-bit difference, such as sdpa's scale applied once, can move a value
    across an int8 step: 0.6 % of the largest logit on Qwen2)."""
    import shutil

    import numpy as np

    from onebit_tools.ort import write_published_quantized

    model, checkpoint = paths(pytestconfig, arch)
    n = json.loads((checkpoint / "config.json").read_text())["num_hidden_layers"]
    out = tmp_path / "model_q4.onnx"
    write_published_quantized(model, out, "matmul_nbits")
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        if (model.parent / name).exists():
            shutil.copy(model.parent / name, tmp_path / name)
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    a = cli.ort_run(onebit, out, prompt, 8, tmp_path / "a.npy", ["--cached", "--verbose", "--act-precision", "float"],
                    env={"ONEBIT_QDQ_DEBUG": "1"}, capture_stderr=True)
    check_fusions(a.stderr, arch, n)
    b = cli.ort_run(onebit, out, prompt, 8, tmp_path / "b.npy", ["--basic", "--act-precision", "float"])
    assert (a.ids == b.ids).all()
    assert float(np.max(np.abs(a.logits - b.logits))) <= 1e-4 * float(np.max(np.abs(b.logits)))


def test_optimum_arch_plan_grows(onebit, pytestconfig, tmp_path, arch):
    """transformers 4.x's mask chain (attention_mask through Flatten,
    Gather, Reshape, And and Expand, or ScatterND, Expand and Where) follows
    no promise of growth, yet a steady step repeats the growth of the step
    before (Plan::Growth): the chain's views and value-shaped nodes are
    reshaped again and checked, the attention products (mask rows over the
    scores) and the KV appends are not. So every steady step grows (after
    the first step's patch and the second's, which records +1), reshaping
    only the chain's nodes, however many layers, with the logits of patches
    that reshape node by node, bit for bit."""
    import re

    model, _ = paths(pytestconfig, arch)
    runs = {}
    for regrow in ("1", "0"):
        runs[regrow] = cli.ort_run(onebit, model, ["--prompt-ids", ",".join(map(str, PROMPT))], STEPS,
                                   tmp_path / f"{regrow}.npy", ["--cached"],
                                   env={"ONEBIT_PROFILE": "1", "ONEBIT_PLAN_REGROW": regrow}, capture_stderr=True)
    line = {k: re.search(r"\((\d+) nodes reshaped .*; (\d+) grown as the step before, (reshaping nothing|reshaping "
                         r"(\d+) nodes each)\)", r.stderr) for k, r in runs.items()}
    assert line["1"] and line["0"], "no patch line in the profile"
    assert int(line["1"].group(2)) == STEPS - 3, line["1"].group(0)
    assert int(line["0"].group(2)) == 0
    chain = int(line["1"].group(4) or 0)
    assert 0 < chain <= 12, f"a grown step reshapes {chain} nodes; the mask chain has at most 12"
    assert int(line["0"].group(1)) > 3 * chain, line["0"].group(0)
    assert runs["1"].logits.tobytes() == runs["0"].logits.tobytes()
