"""A graph from torch.onnx's TorchScript exporter in Optimum's layout
(scripts/export_torchscript.py: per-layer past_key_values, attention_mask,
position_ids; no dtype or shape declared between inputs and outputs; sdpa
attention): the tiny Qwen3 decodes greedily in 1bit to the tokens
onnxruntime and transformers choose (mean KL <= 1e-6 nats, top-1 on every
step), and as with folding alone (--basic), and the fusions
that need dtypes reach it once infer-dtypes has filled them in: every RMS
norm, every SwiGLU, the identity Casts gone; sdpa's split scale folded so
both attention products read the unrepeated cache, which the session keeps.

  pytest scripts/tests/test_torchscript_export.py --onebit build/1bit --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

import json
import re

import pytest

import parity
from conftest import tiny
from onebit_tools import SCRIPTS, cli

CONFIG = SCRIPTS / "configs" / "qwen3-tiny.json"
PROMPT = [9707, 11, 1879, 374, 264]
STEPS = 24
MAX_KL = 1e-6


def model_path(pytestconfig):
    path = tiny(pytestconfig) / "model-cached-ts.onnx"
    if not path.exists():
        pytest.fail(f"{path} is missing: scripts/test_models.py tiny --out {path.parent} exports it")
    return path


@pytest.mark.parametrize("reference", ["onnxruntime", "transformers"])
def test_torchscript_export_greedy(onebit, pytestconfig, tmp_path, reference):
    model = model_path(pytestconfig)
    s = parity.greedy_against(onebit, str(model), PROMPT, STEPS, reference, str(CONFIG), str(tmp_path / "onebit.npy"))
    assert s["steps_ref"] == s["steps_1bit"]
    assert s["top1"] == 1.0, f"top-1 {s['top1'] * 100:.1f}%, first miss at step {s['first_top1_miss']}"
    assert s["mean_kl"] <= MAX_KL, f"mean KL {s['mean_kl']:.3e} > {MAX_KL:g}"


def test_torchscript_export_fusions(onebit, pytestconfig, tmp_path):
    model = model_path(pytestconfig)
    layers = json.loads(CONFIG.read_text())["num_hidden_layers"]
    d = cli.ort_run(onebit, model, ["--prompt-ids", ",".join(map(str, PROMPT))], 4, tmp_path / "l.npy",
                    ["--verbose"], env={"ONEBIT_QDQ_DEBUG": "1"}, capture_stderr=True)
    err = d.stderr

    def fused(name: str) -> int:
        m = re.search(rf"{name}_fused groups=(\d+)", err)
        assert m, f"no {name} line in:\n{err}"
        return int(m.group(1))

    # input, post-attention, q and k norms a layer, and the final norm
    assert fused("rms_norm") == 4 * layers + 1
    assert fused("swiglu") == layers
    # both attention products on the unrepeated cache (sdpa's split scale
    # folded first), and the cache kept in the session
    assert fused("gqa") == 2 * layers
    assert "kv_state_refused" not in err, err
    # rotate_half's bounds read off the head size (reshaped-dims through
    # the Transpose); sdpa's scale, mask, Softmax and Where(IsNaN) in the
    # scores product, the mask's shape checked when planned
    assert fused("rotary") == 2 * layers
    assert fused("scores_softmax") == layers
    # Casts to float32 of float32 values: two around each norm
    m = re.search(r"pass \d+ infer-dtypes: (\d+) -> (\d+) nodes", err)
    assert m, err
    assert int(m.group(1)) - int(m.group(2)) >= 2 * (4 * layers + 1)


def test_torchscript_export_without_the_fusions_agrees(onebit, pytestconfig, tmp_path):
    """The same greedy tokens and logits to rounding with --basic (folding only: no infer-dtypes, no fusions)."""
    import numpy as np

    model = model_path(pytestconfig)
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    a = cli.ort_run(onebit, model, prompt, 8, tmp_path / "a.npy")
    b = cli.ort_run(onebit, model, prompt, 8, tmp_path / "b.npy", ["--basic"])
    assert (a.ids == b.ids).all()
    assert float(np.max(np.abs(a.logits - b.logits))) <= 1e-5 * float(np.max(np.abs(b.logits)))


def test_torchscript_export_keeps_the_cache(onebit, pytestconfig):
    """A decode step appends to the cache in the session (KvAppend) and reads it unrepeated (GqaMatMul)."""
    model = model_path(pytestconfig)
    steps = cli.decode_step_profile(onebit, model)
    assert "com.onebit::KvAppend" in steps, steps
    assert "com.onebit::GqaMatMul" in steps, steps


@pytest.mark.parametrize("quantizer", ["matmul_nbits", "quantize_dynamic"])
def test_torchscript_export_quantized(onebit, pytestconfig, tmp_path, quantizer):
    """The quantized files published beside such exports (transformers.js'
    model_q4.onnx: onnxruntime's MatMulNBitsQuantizer; model_quantized.onnx:
    quantize_dynamic) reach the same fusions, the norm and SwiGLU included
    (MatMulNBits typed as its activation); the 4-bit one agrees with --basic."""
    import shutil

    import numpy as np

    from onebit_tools.ort import write_published_quantized

    model = model_path(pytestconfig)
    out = tmp_path / "model.onnx"
    write_published_quantized(model, out, quantizer)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(model.parent / name, tmp_path / name)
    layers = json.loads(CONFIG.read_text())["num_hidden_layers"]
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    a = cli.ort_run(onebit, out, prompt, 8, tmp_path / "a.npy", env={"ONEBIT_QDQ_DEBUG": "1"}, capture_stderr=True)
    counts = cli.fused_counts(a.stderr)
    assert counts.get("rms_norm") == 4 * layers + 1, a.stderr
    assert counts.get("swiglu") == layers, a.stderr
    assert counts.get("gqa") == 2 * layers, a.stderr
    assert "kv_state_refused" not in a.stderr, a.stderr
    if quantizer == "quantize_dynamic":
        # --basic runs DynamicQuantizeLinear and MatMulInteger as written
        # (per-tensor uint8), the fused path its per-row int8 (docs/parity.md):
        # other numbers by design, checked by ort_int8_tiny.
        assert counts.get("ort_int8") == 7 * layers + 1, a.stderr
        return
    b = cli.ort_run(onebit, out, prompt, 8, tmp_path / "b.npy", ["--basic"])
    assert (a.ids == b.ids).all()
    assert float(np.max(np.abs(a.logits - b.logits))) <= 1e-4 * float(np.max(np.abs(b.logits)))
