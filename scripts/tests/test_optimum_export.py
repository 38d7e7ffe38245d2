"""A graph Optimum 1.x itself wrote (scripts/export_optimum.py: optimum
1.23.3, transformers 4.46.3, ai.onnx opset 14, the TorchScript exporter),
as most published ONNX language models were made: the tiny random Llama
checkpoint of scripts/genai_models.py decodes greedily in 1bit to the
tokens onnxruntime (same file) and transformers (same checkpoint) choose,
and every fusion reaches it: the norms, SwiGLU, the rotary embedding, both
attention products on the unrepeated cache (sdpa's scale read off the
query's shape, the mask's length off the repeated keys), the scores' scale,
mask and Softmax, and the cache kept in the session; --basic agrees.

  pytest scripts/tests/test_optimum_export.py --onebit build/1bit \\
      --optimum build/models/optimum-tiny --genai build/models/genai-tiny
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import parity
from onebit_tools import cli

PROMPT = [9707, 11, 1879, 374, 264]
STEPS = 24
MAX_KL = 1e-6


def paths(pytestconfig) -> tuple[Path, Path]:
    model = Path(pytestconfig.getoption("optimum")) / "model.onnx"
    checkpoint = Path(pytestconfig.getoption("genai")) / "checkpoint"
    for p in (model, checkpoint):
        if not p.exists():
            pytest.fail(f"{p} is missing: ctest's optimum_build_tiny (scripts/export_optimum.py) writes it")
    return model, checkpoint


def layers(checkpoint: Path) -> int:
    return json.loads((checkpoint / "config.json").read_text())["num_hidden_layers"]


def test_optimum_export_is_opset_14_with_transformers_4_mask(pytestconfig):
    """What is under test: an opset-14 graph with transformers 4.x's mask and sdpa."""
    import onnx

    model, _ = paths(pytestconfig)
    m = onnx.load(str(model), load_external_data=False)
    assert {o.domain: o.version for o in m.opset_import}.get("", None) == 14
    ops = Counter(n.op_type for n in m.graph.node)
    assert ops["Trilu"] >= 1 and ops["ScatterND"] >= 1, ops  # the 4.x causal mask
    assert "Attention" not in ops and "LayerNormalization" not in ops, ops


@pytest.mark.parametrize("reference", ["onnxruntime", "transformers"])
def test_optimum_export_greedy(onebit, pytestconfig, tmp_path, reference):
    model, checkpoint = paths(pytestconfig)
    s = parity.greedy_against(onebit, str(model), PROMPT, STEPS, reference, None, str(tmp_path / "onebit.npy"),
                              hf=str(checkpoint), extra=["--cached"])
    assert s["steps_ref"] == s["steps_1bit"]
    assert s["top1"] == 1.0, f"top-1 {s['top1'] * 100:.1f}%, first miss at step {s['first_top1_miss']}"
    assert s["mean_kl"] <= MAX_KL, f"mean KL {s['mean_kl']:.3e} > {MAX_KL:g}"


def test_optimum_export_fusions(onebit, pytestconfig, tmp_path):
    model, checkpoint = paths(pytestconfig)
    n = layers(checkpoint)
    d = cli.ort_run(onebit, model, ["--prompt-ids", ",".join(map(str, PROMPT))], 4, tmp_path / "l.npy",
                    ["--verbose", "--cached"], env={"ONEBIT_QDQ_DEBUG": "1"}, capture_stderr=True)
    err = d.stderr
    counts = cli.fused_counts(err)
    assert counts.get("rms_norm") == 2 * n + 1, err  # input and post-attention norms a layer, the final norm
    assert counts.get("swiglu") == n, err
    assert counts.get("rotary") == 2 * n, err
    # both products on the unrepeated cache, the repeat proven; the mask's
    # Slice reads the keys' length off the cache, so the repeat chains are dead
    assert counts.get("gqa") == 2 * n, err
    assert re.search(rf"gqa_fused groups={2 * n} repeat_proven={2 * n} shape_reads_moved={n} ", err), err
    assert "kv_state_refused" not in err, err
    # sdpa's scale (1/sqrt(q.size(-1)), split on both factors) folded into one,
    # with the mask and Softmax in the scores product
    assert counts.get("scores_softmax") == n, err


def test_optimum_export_without_the_fusions_agrees(onebit, pytestconfig, tmp_path):
    """The same greedy tokens and logits to rounding with --basic (folding only)."""
    model, _ = paths(pytestconfig)
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    a = cli.ort_run(onebit, model, prompt, 8, tmp_path / "a.npy", ["--cached"])
    b = cli.ort_run(onebit, model, prompt, 8, tmp_path / "b.npy", ["--basic"])
    assert (a.ids == b.ids).all()
    assert float(np.max(np.abs(a.logits - b.logits))) <= 1e-5 * float(np.max(np.abs(b.logits)))


def test_optimum_export_keeps_the_cache(onebit, pytestconfig):
    """A decode step appends to the cache in the session and reads it unrepeated (the repeat chains dead:
    test_optimum_export_fusions' shape_reads_moved)."""
    model, _ = paths(pytestconfig)
    steps = cli.decode_step_profile(onebit, model)
    assert "com.onebit::KvAppend" in steps, steps
    assert "com.onebit::GqaMatMul" in steps, steps


@pytest.mark.parametrize("quantizer", ["matmul_nbits", "quantize_dynamic"])
def test_optimum_export_quantized(onebit, pytestconfig, tmp_path, quantizer):
    """The quantized files onnx-community folders hold beside such an export
    (model_q4.onnx: MatMulNBitsQuantizer; model_quantized.onnx:
    quantize_dynamic) reach the same fusions; the 4-bit one agrees with --basic."""
    import shutil

    from onebit_tools.ort import write_published_quantized

    model, checkpoint = paths(pytestconfig)
    n = layers(checkpoint)
    out = tmp_path / "model.onnx"
    write_published_quantized(model, out, quantizer)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(model.parent / name, tmp_path / name)
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    a = cli.ort_run(onebit, out, prompt, 8, tmp_path / "a.npy", ["--cached"], env={"ONEBIT_QDQ_DEBUG": "1"},
                    capture_stderr=True)
    counts = cli.fused_counts(a.stderr)
    for name, want in (("rms_norm", 2 * n + 1), ("swiglu", n), ("rotary", 2 * n), ("gqa", 2 * n),
                       ("scores_softmax", n)):
        assert counts.get(name) == want, (name, a.stderr)
    assert "kv_state_refused" not in a.stderr, a.stderr
    if quantizer == "quantize_dynamic":
        # the seven projections a layer (the LM head reads the tied embedding
        # through a Transpose, which quantize_dynamic leaves in float);
        # --basic runs per-tensor uint8 where the fused path is per-row int8
        assert counts.get("ort_int8") == 7 * n, a.stderr
        return
    b = cli.ort_run(onebit, out, prompt, 8, tmp_path / "b.npy", ["--basic"])
    assert (a.ids == b.ids).all()
    assert float(np.max(np.abs(a.logits - b.logits))) <= 1e-4 * float(np.max(np.abs(b.logits)))


def test_optimum_export_fp16(onebit, pytestconfig, tmp_path):
    """transformers.js' model_fp16.onnx made from the export: float16 inside,
    float32 inputs and outputs (the cache Cast to float16 before its Concat
    and back after). 1bit keeps the cache in the session in float16, runs
    sdpa's split scale as one float16 scale and each norm's float16 chain as
    one RmsNorm computed in float32 (as onnxruntime's CPU provider runs it); it agrees with the graph fed
    its own float32 present (ONEBIT_KV_STATE=0) token for token, and with
    onnxruntime on the same file to float16 rounding, teacher-forced on
    1bit's tokens (this random model has near ties in float16: 0.017 logits
    apart at step 3, where a free run of either may take the other)."""
    import shutil

    from onebit_tools.ort import write_published_quantized

    model, checkpoint = paths(pytestconfig)
    n = layers(checkpoint)
    out = tmp_path / "model_fp16.onnx"
    write_published_quantized(model, out, "fp16")
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(model.parent / name, tmp_path / name)
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    a = cli.ort_run(onebit, out, prompt, STEPS, tmp_path / "a.npy", ["--verbose"], env={"ONEBIT_QDQ_DEBUG": "1"},
                    capture_stderr=True)
    counts = cli.fused_counts(a.stderr)
    assert "kv_state_refused" not in a.stderr, a.stderr
    # both products on the unrepeated cache: sdpa's float16 scales folded first
    assert counts.get("gqa") == 2 * n, a.stderr
    # the norms' float16 chains, computed in float32 as onnxruntime computes them
    assert counts.get("rms_norm") == 2 * n + 1, a.stderr
    # the LM head cut to its last rows through the logits' Cast to float32
    assert "last-position: 'logits' computes only its last rows" in a.stderr, a.stderr
    steps = cli.decode_step_profile(onebit, out)
    assert "KV state (float16)" in steps, steps
    b = cli.ort_run(onebit, out, prompt, STEPS, tmp_path / "b.npy", [], env={"ONEBIT_KV_STATE": "0"})
    assert (a.ids == b.ids).all(), f"{a.ids.tolist()} != {b.ids.tolist()}"
    ref, ref_ids = parity.ort_greedy(str(out), a.prompt, STEPS, set(), a.ids)
    s = parity.compare(ref, ref_ids, a.logits, a.ids)
    print(parity.report("model_fp16_vs_onnxruntime (forced)", s))
    assert s["steps_ref"] == s["steps_1bit"] == STEPS
    assert s["top1"] >= 0.9, f"top-1 {s['top1'] * 100:.1f}%, first miss at step {s['first_top1_miss']}"
    assert s["mean_kl"] <= 1e-3, f"mean KL {s['mean_kl']:.3e}"
