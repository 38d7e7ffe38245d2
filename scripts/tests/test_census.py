"""`1bit inspect --json` against scripts/onnx_census.py (the onnx package's own
count) on the same files: every field must agree. One test per file and field:

  test_field[model.onnx-op_counts]

  pytest scripts/tests/test_census.py --onebit build/1bit --model M1.onnx --model M2.onnx

Default --model: the tiny export's model.onnx and model-cached.onnx (--tiny).
"""
from __future__ import annotations

import json

import pytest

import onnx_census
from conftest import models, tiny
from onebit_tools import cli

FIELDS = ["ir_version", "nodes", "matmuls", "constant_weight_matmuls", "opsets", "op_counts", "weight_shapes",
          "quantized_matmuls", "custom_domains", "initializers", "initializer_bytes", "inputs", "outputs"]


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        t = tiny(metafunc.config)
        paths = models(metafunc.config, [t / "model.onnx", t / "model-cached.onnx"])
        metafunc.parametrize("case", [(p, f) for p in paths for f in FIELDS], ids=[f"{p.name}-{f}" for p in paths for f in FIELDS])


_census: dict = {}


def both(onebit: str, model) -> tuple[dict, dict]:
    if model not in _census:
        ours = cli.inspect_json(onebit, model)
        theirs = json.loads(json.dumps(onnx_census.census(str(model))))  # tuples -> lists, as in 1bit's JSON
        print(f"{model.name}: {ours['matmuls']} MatMul, {len(ours['weight_shapes'])} distinct weight shapes, "
              f"{ours['nodes']} nodes")
        _census[model] = (ours, theirs)
    return _census[model]


def test_field(case, onebit):
    model, field = case
    ours, theirs = both(onebit, model)
    assert field in theirs, f"onnx_census has no field {field}"
    assert ours.get(field) == theirs[field], f"{model.name}: {field}: 1bit {ours.get(field)} vs onnx {theirs[field]}"
