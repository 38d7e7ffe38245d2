"""Golden end to end on the tiny Qwen3 (issue 3): 1bit decodes greedily to
exactly the tokens transformers chooses on the same seeded weights
(scripts/configs/qwen3-tiny.json, random init, seed 0), and agrees with
onnxruntime on the same graph; uncached (prompt ids) and cached (a prompt
through the tokenizer). Per reference: mean KL(reference || 1bit) <= 1e-6
nats, top-1 agreement on every step, and both runs stop at the same step
(scripts/parity.py's statistics). One test per graph and reference:

  test_default[onnxruntime]   test_default[transformers]
  test_cached[onnxruntime]    test_cached[transformers]

  pytest scripts/tests/test_golden_tiny.py --onebit build/1bit --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import parity
from conftest import tiny
from onebit_tools import SCRIPTS

CONFIG = SCRIPTS / "configs" / "qwen3-tiny.json"
MAX_KL = 1e-6
GRAPHS = {
    "default": ("model.onnx", ["--prompt-ids", "9707,11,1879,374,264"], 24, []),
    "cached": ("model-cached.onnx", ["--prompt", "Hello, world! The answer is"], 32, ["--cached"]),
}
REFERENCES = ["onnxruntime", "transformers"]

_onebit_runs: dict = {}


def onebit_run(graph: str, onebit: str, config, tmp_path_factory):
    if graph not in _onebit_runs:
        name, prompt_args, n, extra = GRAPHS[graph]
        model = tiny(config) / name
        dump = tmp_path_factory.mktemp(f"golden-{graph}") / "onebit.npy"
        got, got_ids, prompt = parity.run_onebit(onebit, str(model), prompt_args, n, extra, str(dump))
        print(f"prompt {len(prompt)} tokens; 1bit made {len(got_ids)} steps: {got_ids.tolist()}")
        _onebit_runs[graph] = (model, n, got, got_ids, prompt)
    return _onebit_runs[graph]


def check(graph: str, reference: str, onebit: str, config, tmp_path_factory) -> None:
    model, n, got, got_ids, prompt = onebit_run(graph, onebit, config, tmp_path_factory)
    eos = parity.eos_ids(str(model))
    if reference == "onnxruntime":
        ref, ref_ids = parity.ort_greedy(str(model), prompt, n, eos)
    else:
        args = SimpleNamespace(hf=None, config=str(CONFIG), layers=None, seed=0)
        ref, ref_ids = parity.hf_greedy(args, prompt, n, eos)
        print(f"transformers chose: {ref_ids.tolist()}")
    s = parity.compare(ref, ref_ids, got, got_ids)
    print(parity.report(f"vs_{reference}", s))
    assert s["steps_ref"] == s["steps_1bit"], f"{reference} made {s['steps_ref']} steps, 1bit {s['steps_1bit']}"
    assert s["top1"] == 1.0, f"top-1 agreement {s['top1'] * 100:.1f}%, first miss at step {s['first_top1_miss']}"
    assert s["mean_kl"] <= MAX_KL, f"mean KL {s['mean_kl']:.3e} > {MAX_KL:g}"


@pytest.mark.parametrize("reference", REFERENCES)
def test_default(reference, onebit, pytestconfig, tmp_path_factory):
    check("default", reference, onebit, pytestconfig, tmp_path_factory)


@pytest.mark.parametrize("reference", REFERENCES)
def test_cached(reference, onebit, pytestconfig, tmp_path_factory):
    check("cached", reference, onebit, pytestconfig, tmp_path_factory)
