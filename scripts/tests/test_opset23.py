"""Exports at opset 23 (issue 12): the tiny Qwen3 exported by torch.onnx at
opset 23 (RMSNormalization and RotaryEmbedding; with sdpa attention also
the Attention op) decodes greedily in 1bit to the tokens onnxruntime and
transformers choose, with mean KL <= 1e-6 nats and top-1 agreement on every
step (scripts/parity.py's statistics). One test per graph and reference:

  test_opset23[model-cached-op23-onnxruntime]

and one that the rotary Cos and Sin torch.onnx repeats for every
RotaryEmbedding are computed once (the merge-duplicate-nodes pass), with
every output of a cached step byte-identical to the graph without the pass.

  pytest scripts/tests/test_opset23.py --onebit build/1bit --tiny build/models/qwen3-tiny
"""
from __future__ import annotations


import pytest

import parity
from conftest import tiny
from onebit_tools import SCRIPTS, cli
from test_run_parity import make_inputs

CONFIG = SCRIPTS / "configs" / "qwen3-tiny.json"
PROMPT = [9707, 11, 1879, 374, 264]
STEPS = 24
MAX_KL = 1e-6


@pytest.mark.parametrize("reference", ["onnxruntime", "transformers"])
@pytest.mark.parametrize("graph", ["model-cached-op23", "model-cached-op23-sdpa"])
def test_opset23(onebit, pytestconfig, tmp_path, graph, reference):
    import onnx

    model = tiny(pytestconfig) / f"{graph}.onnx"
    ops = {n.op_type for n in onnx.load(str(model), load_external_data=False).graph.node}
    assert {"RMSNormalization", "RotaryEmbedding"} <= ops, sorted(ops)
    if graph.endswith("sdpa"):
        assert "Attention" in ops, sorted(ops)
    s = parity.greedy_against(onebit, str(model), PROMPT, STEPS, reference, str(CONFIG), str(tmp_path / "onebit.npy"))
    assert s["steps_ref"] == s["steps_1bit"]
    assert s["top1"] == 1.0, f"top-1 {s['top1'] * 100:.1f}%, first miss at step {s['first_top1_miss']}"
    assert s["mean_kl"] <= MAX_KL, f"mean KL {s['mean_kl']:.3e} > {MAX_KL:g}"


def test_opset23_rotary_computed_once(onebit, pytestconfig):
    import json
    import re

    import onnx

    model = tiny(pytestconfig) / "model-cached-op23-sdpa.onnx"
    g = onnx.load(str(model), load_external_data=False).graph
    trig = sum(n.op_type in ("Cos", "Sin") for n in g.node)
    layers = json.loads(CONFIG.read_text())["num_hidden_layers"]
    assert trig == 4 * layers, f"{trig} Cos/Sin nodes for {layers} layers: the export changed"
    inputs = make_inputs(onnx.load(str(model), load_external_data=False), 7, 5, 3)
    on = cli.run(onebit, model, inputs, ["--verbose"])
    line = re.search(r"pass (\d+) merge-duplicate-nodes: (\d+) -> (\d+) nodes", on.stderr)
    assert line, on.stderr
    index, before, after = (int(x) for x in line.groups())
    assert before - after == trig - 2, line.group(0)  # one Cos and one Sin left
    off = cli.run(onebit, model, inputs, ["--stop-after-pass", str(index - 1)])
    assert sorted(on.outputs) == sorted(off.outputs)
    for name, got in on.outputs.items():
        assert got.shape == off.outputs[name].shape, name
        assert got.tobytes() == off.outputs[name].tobytes(), f"{name} differs with the pass"
