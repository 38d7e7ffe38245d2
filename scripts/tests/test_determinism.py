"""Determinism, asserted (docs/reliability.md): greedy tokens and dumped
logits identical across runs and across 1 and 2 threads, uncached and
cached.

    pytest test_determinism.py --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import tiny
from onebit_tools.cli import ort_run


@pytest.mark.parametrize("graph", ["model.onnx", "model-cached.onnx"])
def test_same_bits_across_runs_and_threads(pytestconfig, onebit, work, graph):
    model = tiny(pytestconfig) / graph
    extra = ["--cached"] if "cached" in graph else []
    dumps = []
    for run, threads in enumerate([1, 1, 2, 2]):
        d = ort_run(onebit, model, ["--prompt-ids", "9707,11,1879,374,264,1273"], 12,
                    work / f"{graph}-{run}-{threads}.npy", extra + ["--threads", str(threads)])
        dumps.append(d)
    first = dumps[0]
    for d in dumps[1:]:
        assert d.ids.tolist() == first.ids.tolist()
        assert np.array_equal(d.logits.view(np.uint32), first.logits.view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
def test_weights_in_place_same_bits_as_packed(pytestconfig, onebit, work, threads):
    """The default reads float32 MatMul weights in place (decode on the axpy
    kernels, prefill on tiles reading B where it lies); the tokens and every
    logit must match --pack-weights bit for bit, over a prompt long enough
    for the prefill tiles that pack B a block at a time."""
    for graph in ["model.onnx", "model-cached.onnx"]:
        model = tiny(pytestconfig) / graph
        extra = ["--cached"] if "cached" in graph else []
        prompt = ["--prompt-ids", ",".join(str(9707 + 13 * i) for i in range(70)), "--threads", str(threads)]
        packed = ort_run(onebit, model, prompt, 8, work / f"{graph}-packed-{threads}.npy", extra + ["--pack-weights"])
        mapped = ort_run(onebit, model, prompt, 8, work / f"{graph}-mapped-{threads}.npy", extra)
        assert mapped.ids.tolist() == packed.ids.tolist()
        assert np.array_equal(mapped.logits.view(np.uint32), packed.logits.view(np.uint32))
