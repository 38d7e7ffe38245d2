"""End to end on the reference NPU device (software, not an NPU): a QDQ
export generated with its KV cache, `1bit ort-run --npu reference` with a
design for every projection shape against `--npu off` — the same tokens and
bit-identical logits; the prefill's GEMMs on the device (npu_qdq_device
lines at the prompt's row count), the decode steps' single rows on the host
(npu_qdq_host_rows m=1), and the LM head without a design (npu_qdq_fallback).

    pytest test_npu_e2e.py --model model-cached-qdq.onnx --designs 16x64x64,16x64x32,...
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from onebit_tools.cli import ort_run


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", ["prompt20", "prompt37"])


@pytest.fixture(scope="module")
def runs(pytestconfig, onebit, work):
    models = pytestconfig.getoption("model")
    if len(models) != 1:
        pytest.fail("give one --model (a QDQ export with a KV cache)")
    designs = pytestconfig.getoption("designs")
    if not designs:
        pytest.fail("give --designs MxKxN,... (ONEBIT_NPU_DESIGNS' short form)")
    out = {}
    for case, length in (("prompt20", 20), ("prompt37", 37)):
        ids = ",".join(str(7 + 13 * i) for i in range(length))
        common = ["--prompt-ids", ids]
        env = {"ONEBIT_NPU_DESIGNS": designs}
        host = ort_run(onebit, models[0], common, 8, work / f"{case}-host.npy", ["--cached", "--npu", "off"], env=env)
        dev = ort_run(onebit, models[0], common, 8, work / f"{case}-npu.npy",
                      ["--cached", "--npu", "reference", "--npu-trace"], env=env, capture_stderr=True)
        out[case] = (length, host, dev)
    return out


def test_same_tokens(runs, case):
    _, host, dev = runs[case]
    assert host.ids.tolist() == dev.ids.tolist()


def test_bit_identical_logits(runs, case):
    _, host, dev = runs[case]
    assert host.logits.shape == dev.logits.shape
    assert np.array_equal(host.logits.view(np.uint32), dev.logits.view(np.uint32))


def test_prefill_on_the_device(runs, case):
    length, _, dev = runs[case]
    lines = re.findall(r"npu_qdq_device m=(\d+) k=\d+ n=\d+ design=\S+ runs=(\d+)", dev.stderr)
    assert lines, dev.stderr
    assert {int(m) for m, _ in lines} == {length}, "only the prefill reaches the device"


def test_decode_on_the_host(runs, case):
    _, _, dev = runs[case]
    assert re.search(r"npu_qdq_host_rows m=1 k=\d+ n=\d+ min=16", dev.stderr), dev.stderr


def test_lm_head_without_a_design(runs, case):
    _, _, dev = runs[case]
    assert re.search(r"npu_qdq_fallback node='[^']*' k=\d+ n=\d+ why=no-design", dev.stderr), dev.stderr
