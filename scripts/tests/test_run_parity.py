"""One graph run by `1bit run` and by onnxruntime on the same inputs: every
output must agree, rel = max|1bit - ort| / max|ort| <= --tol.

Inputs are made from the graph's declared inputs: token ids for input_ids, a
causal attention mask of ones, positions continuing the cache, and a random
cache (normal, scaled) for past inputs, so a cached graph is checked with a
non-empty past (5) as well as an empty one (0). One test per graph, past
length and output:

  test_output[model.onnx-past0-logits]
  test_output[model-cached.onnx-past5-present]

  pytest scripts/tests/test_run_parity.py --onebit build/1bit --model m.onnx [--tol 1e-4]
      [--onebit-arg=--stop-after-pass --onebit-arg=0] [--ort-opt disable]

Default --model: the tiny export's model.onnx and model-cached.onnx (--tiny).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import models, tiny
from onebit_tools import cli
from onebit_tools.ort import session

SEQ = 7
PASTS = [0, 5]
SEED = 0
TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64, 9: np.bool_}


def is_cache(name: str) -> bool:
    return name == "past" or name.startswith("past_key_values")


def make_inputs(m: onnx.ModelProto, seq: int, past: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for vi in m.graph.input:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        dtype = TYPES[tt.elem_type]
        name = vi.name
        if name == "input_ids":
            # The declared vocabulary (an export may leave the logits shape out).
            ldims = next((o.type.tensor_type.shape.dim for o in m.graph.output if o.name == "logits"), [])
            vocab = ldims[-1].dim_value if len(ldims) and ldims[-1].dim_value > 0 else 1000
            inputs[name] = rng.integers(0, max(vocab, 2), size=(1, seq)).astype(dtype)
        elif name == "attention_mask":
            inputs[name] = np.ones((1, past + seq), dtype=dtype)
        elif name == "position_ids":
            inputs[name] = np.arange(past, past + seq, dtype=dtype)[None, :]
        elif is_cache(name):
            shape = [d if d is not None else past for d in dims]
            shape[0] = dims[0] if dims[0] is not None else 1
            inputs[name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
        else:
            shape = [d if d is not None else seq for d in dims]
            if np.issubdtype(dtype, np.floating):
                inputs[name] = rng.standard_normal(shape).astype(dtype)
            else:
                inputs[name] = rng.integers(0, 8, size=shape).astype(dtype)
    return inputs


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    cases, ids = [], []
    for model in models(metafunc.config, [tiny(metafunc.config) / "model.onnx", tiny(metafunc.config) / "model-cached.onnx"]):
        g = onnx.load(str(model), load_external_data=False).graph
        pasts = PASTS if any(is_cache(i.name) for i in g.input) else [0]
        for past in pasts:
            for out in g.output:
                cases.append((model, past, out.name))
                ids.append(f"{model.name}-past{past}-{out.name}")
    metafunc.parametrize("case", cases, ids=ids)


_runs: dict = {}


def runs(model: Path, past: int, onebit: str, config) -> tuple[dict, dict]:
    """onnxruntime's and 1bit's outputs for (model, past), computed once."""
    key = (model, past)
    if key not in _runs:
        m = onnx.load(str(model), load_external_data=False)
        inputs = make_inputs(m, SEQ, past, SEED + past)
        sess = session(model, opt=config.getoption("ort_opt"))
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
        got = cli.run(onebit, model, inputs, config.getoption("onebit_arg")).outputs
        _runs[key] = (want, got)
    return _runs[key]


def test_output(case, onebit, pytestconfig):
    model, past, name = case
    tol = pytestconfig.getoption("tol")
    want, got = runs(model, past, onebit, pytestconfig)
    ref = want[name]
    key = cli.output_file(name)
    assert key in got, f"{name}: 1bit wrote no output (it wrote {sorted(got)})"
    out = got[key]
    assert out.shape == ref.shape, f"{name}: shape {out.shape}, onnxruntime {ref.shape}"
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
    rel = diff / scale if scale > 0 else diff
    print(f"{name} past={past} seq={SEQ} shape={list(ref.shape)} max|d|={diff:.3e} max|ort|={scale:.3e} "
          f"rel={rel:.3e} (tol {tol:g})")
    assert rel <= tol, f"{name}: rel {rel:.3e} > tol {tol:g}"
