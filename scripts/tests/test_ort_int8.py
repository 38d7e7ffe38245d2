"""onnxruntime's dynamic int8 (quantize_dynamic) on the qd8 GEMM (issue 12):
the tiny Qwen3's cached export quantized by onnxruntime.quantization.
quantize_dynamic; 1bit fuses every DynamicQuantizeLinear → MatMulInteger →
Cast → Mul group into one Qd8MatMul (none refused), and its logits are as
close to the float model's as onnxruntime's own run of the int8 graph
(KL against the float graph on the same teacher-forced sequence: per-row
int8 activations against onnxruntime's one uint8 scale per tensor).

  pytest scripts/tests/test_ort_int8.py --onebit build/1bit --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

import os
import subprocess

import numpy as np

import parity
from conftest import tiny

PROMPT = [9707, 11, 1879, 374, 264]
STEPS = 24


def test_quantize_dynamic_fuses_and_matches(onebit, pytestconfig, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = tiny(pytestconfig) / "model-cached.onnx"
    model = tmp_path / "model-cached-dyn.onnx"
    quantize_dynamic(str(src), str(model), weight_type=QuantType.QInt8)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        if (src.parent / name).exists():
            (tmp_path / name).write_bytes((src.parent / name).read_bytes())

    env = dict(os.environ, ONEBIT_QDQ_DEBUG="1")
    p = subprocess.run([onebit, "ort-run", str(model), "--prompt-ids", "1,2", "-n", "1"], capture_output=True,
                       text=True, env=env, check=True)
    line = next(l for l in p.stderr.splitlines() if "ort_int8_fused" in l)
    print(line)
    assert "refused=0" in line and "groups=0" not in line, line

    got, ids, prompt = parity.run_onebit(onebit, str(model), ["--prompt-ids", ",".join(map(str, PROMPT))], STEPS, [],
                                         str(tmp_path / "onebit.npy"))
    ref, ref_ids = parity.ort_greedy(str(src), prompt, STEPS, set(), follow=ids)  # the float graph
    ort, ort_ids = parity.ort_greedy(str(model), prompt, STEPS, set(), follow=ids)  # onnxruntime on the int8 graph
    ours = parity.compare(ref, ref_ids, got, ids)
    theirs = parity.compare(ref, ref_ids, ort, ort_ids)
    print(parity.report("1bit_int8_vs_float", ours))
    print(parity.report("onnxruntime_int8_vs_float", theirs))
    print(parity.report("1bit_vs_onnxruntime_int8", parity.compare(ort, ort_ids, got, ids)))
    assert ours["mean_kl"] <= 2 * theirs["mean_kl"] + 1e-4
    assert ours["top1"] >= theirs["top1"] - 0.1
