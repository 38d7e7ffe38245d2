"""float16 weights under float32 compute (issue 12): the tiny Qwen3's cached
export with every MatMul weight stored as float16 behind a Cast
(scripts/f16_weights.py). 1bit keeps the weights float16 (each MatMul
becomes an F16wMatMul, none refused) and decodes with parity to
onnxruntime on the same graph: mean KL <= 1e-6 nats, top-1 on every step.

  pytest scripts/tests/test_f16_weights.py --onebit build/1bit --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import parity
from conftest import tiny
from onebit_tools import SCRIPTS

PROMPT = [9707, 11, 1879, 374, 264]
STEPS = 24


def test_f16_weights_parity(onebit, pytestconfig, tmp_path):
    src = tiny(pytestconfig) / "model-cached.onnx"
    model = tmp_path / "model-cached-f16w.onnx"
    subprocess.run([sys.executable, str(SCRIPTS / "f16_weights.py"), str(src), "-o", str(model)], check=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        if (src.parent / name).exists():
            (tmp_path / name).write_bytes((src.parent / name).read_bytes())
    env = dict(os.environ, ONEBIT_QDQ_DEBUG="1")
    p = subprocess.run([onebit, "ort-run", str(model), "--prompt-ids", "1,2", "-n", "1"], capture_output=True,
                       text=True, env=env, check=True)
    line = next(l for l in p.stderr.splitlines() if "f16w_fused" in l)
    print(line)
    assert "refused=0" in line and "groups=0" not in line, line
    got, ids, prompt = parity.run_onebit(onebit, str(model), ["--prompt-ids", ",".join(map(str, PROMPT))], STEPS, [],
                                         str(tmp_path / "onebit.npy"))
    ref, ref_ids = parity.ort_greedy(str(model), prompt, STEPS, parity.eos_ids(str(model)))
    s = parity.compare(ref, ref_ids, got, ids)
    print(parity.report("f16w_vs_onnxruntime", s))
    assert s["steps_ref"] == s["steps_1bit"]
    assert s["top1"] == 1.0 and s["mean_kl"] <= 1e-6


CONFIG = SCRIPTS / "configs" / "qwen3-tiny.json"


@pytest.fixture(scope="module")
def float16_export(tmp_path_factory):
    """The tiny Qwen3 exported in float16 (scripts/export_onnx.py --dtype
    float16: float16 weights, activations and cache), once per module."""
    model = tmp_path_factory.mktemp("f16export") / "model-cached.onnx"
    subprocess.run([sys.executable, str(SCRIPTS / "export_onnx.py"), "--config", str(CONFIG), "--random-init",
                    "--cached", "--dtype", "float16", "-o", str(model)], check=True)
    return model


def test_float16_export_parity(onebit, tmp_path, float16_export):
    """A transformers export in float16 against onnxruntime on the same
    graph, teacher-forced: every op rounds to float16 on both sides, in their
    own orders, so mean KL <= 1e-4 and top-1 on every step; the KV state
    kept in the session gives the plain graph's logits bit for bit."""
    import numpy as np

    model = float16_export
    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]
    got, ids, prompt_ids = parity.run_onebit(onebit, str(model), prompt, STEPS, [], str(tmp_path / "onebit.npy"))
    ref, ref_ids = parity.ort_greedy(str(model), prompt_ids, STEPS, parity.eos_ids(str(model)), follow=ids)
    s = parity.compare(ref, ref_ids, got, ids)
    print(parity.report("float16_export_vs_onnxruntime", s))
    assert s["top1"] == 1.0 and s["mean_kl"] <= 1e-4
    env = dict(os.environ, ONEBIT_KV_STATE="0")
    out = tmp_path / "plain.npy"
    subprocess.run([onebit, "ort-run", str(model), *prompt, "-n", str(STEPS), "--dump-logits", str(out), "--quiet"],
                   check=True, env=env, capture_output=True)
    assert np.array_equal(np.load(out), got)


def decode_ops(onebit: str, model, extra: list[str] = ()) -> set[str]:
    """The op types a run of the prompt and 8 steps ran, as ONEBIT_PROFILE's
    table after `ort-run` lists them (the rows after its 'profile:' line)."""
    env = dict(os.environ, ONEBIT_PROFILE="1")
    p = subprocess.run([onebit, "ort-run", str(model), "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "8",
                        "--quiet", *extra], capture_output=True, text=True, env=env, check=True)
    lines = p.stderr.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("profile:"))
    return {l.split()[0] for l in lines[start + 1:] if l.startswith("  ") and " ms " in l}


def test_float16_models_run_the_fast_kernels(onebit, pytestconfig, float16_export):
    """Issue 12's float16 models on the fast kernels, not the reference
    loops: the float16 export's run (prompt and steps) does every MatMul on F16wMatMul (the
    weights kept float16, packed once), the attention's products on the
    KV state, the norm and rotary fused; no plain MatMul, Softmax or norm
    chain runs. So does onnxruntime-genai's fp16 CPU build (GroupedAttention
    for its MultiHeadAttention)."""
    ops = decode_ops(onebit, float16_export)
    print(sorted(ops))
    assert {"com.onebit::F16wMatMul", "com.onebit::GqaMatMul", "com.onebit::RmsNorm", "com.onebit::RotaryHalf"} <= ops
    assert not ops & {"MatMul", "Softmax", "Pow", "ReduceMean", "Sqrt", "Div"}, ops
    genai = Path(pytestconfig.getoption("genai")) / "genai-fp16" / "model.onnx"
    ops = decode_ops(onebit, genai)
    print(sorted(ops))
    assert {"com.onebit::F16wMatMul", "com.onebit::GroupedAttention"} <= ops
    assert not ops & {"MatMul", "com.microsoft::MultiHeadAttention", "Softmax"}, ops


def test_float16_export_keeps_a_float16_cache(onebit, pytestconfig, tmp_path, float16_export):
    """The float16 export's keys and values are float16, so the KV state
    stores them as float16 by default (--kv-dtype auto): half the bytes a
    step reads, the logits bit for bit those of a float32 cache. A float32
    export's default stays float32."""
    import json

    import numpy as np

    prompt = ["--prompt-ids", ",".join(map(str, PROMPT))]

    def run(model, extra, name):
        d = parity.run_onebit(onebit, str(model), prompt, STEPS, extra, str(tmp_path / name))
        p = subprocess.run([onebit, "ort-run", str(model), *prompt, "-n", "2", "--json", *extra],
                           capture_output=True, text=True, check=True)
        return d[0], d[1], json.loads(p.stdout[p.stdout.index("{"):])["kv_dtype"]

    auto, ids_auto, kv_auto = run(float16_export, [], "auto.npy")
    f32, ids32, kv32 = run(float16_export, ["--kv-dtype", "f32"], "f32.npy")
    assert (kv_auto, kv32) == ("float16", "float32")
    assert list(ids_auto) == list(ids32)
    assert np.array_equal(auto.view(np.uint32), f32.view(np.uint32))
    assert run(tiny(pytestconfig) / "model-cached.onnx", [], "f32export.npy")[2] == "float32"


def test_q4f16_parity(onebit, tmp_path, float16_export):
    """transformers.js' model_q4f16.onnx recipe: the float16 export with
    every MatMul weight quantized by onnxruntime's MatMulNBitsQuantizer
    (4-bit, block 32, accuracy_level 4), so MatMulNBits takes float16 A and
    float16 scales. 1bit widens A, runs its 4-bit GEMM and rounds each output
    once to float16. One MatMulNBits node gives onnxruntime's float16 output
    to the last bit here (int8-block against its accuracy_level 4); over the
    model, though, float16 rounding elsewhere moves activations across int8
    steps on one side and not the other: measured mean KL 1.7e-3 with either
    1bit precision (int8-block or float) against onnxruntime's int8, so the
    bound is 5e-3, with a top-1 miss only at a near tie (0.1 logits)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = tmp_path / "model_q4f16.onnx"
    q = MatMulNBitsQuantizer(onnx.load(str(float16_export)), block_size=32, is_symmetric=True, accuracy_level=4)
    q.process()
    q.model.save_model_to_file(str(model), True)
    nodes = [n for n in onnx.load(str(model), load_external_data=False).graph.node if n.op_type == "MatMulNBits"]
    assert len(nodes) >= 8, f"the quantizer wrote {len(nodes)} MatMulNBits nodes"
    kls = []
    for act in ("auto", "float"):
        got, ids, prompt_ids = parity.run_onebit(onebit, str(model), ["--prompt-ids", ",".join(map(str, PROMPT)),
                                                 "--act-precision", act], STEPS, [], str(tmp_path / f"{act}.npy"))
        ref, ref_ids = parity.ort_greedy(str(model), prompt_ids, STEPS, parity.eos_ids(str(model)), follow=ids)
        s = parity.compare(ref, ref_ids, got, ids)
        print(parity.report(f"q4f16_{act}_vs_onnxruntime", s))
        for step, margin in parity.top1_misses(got, ref, s["steps"]):
            assert margin <= 0.1, f"{act}: top-1 differs at step {step} with a margin of {margin:.4f}"
        kls.append(s["mean_kl"])
    assert max(kls) <= 5e-3, f"mean KL (auto, float) {kls}"
