"""The op registry (`1bit inspect --ops`) against the operator schemas of the
pinned onnx package: for every ai.onnx op 1bit implements, its entries cover
one unbroken span of opsets that reaches the newest opset onnx defines, and
every schema version inside that span starts an entry of its own, so each
node runs at the semantics of the version its model imports (a version
that changes behaviour gets a kernel that reads the opset; one that only
adds types shares the kernel). One case per op:

  test_op_versions[Cast]

  pytest scripts/tests/test_opset_ranges.py --onebit build/1bit
"""
from __future__ import annotations

import subprocess
from collections import defaultdict

import onnx
import onnx.defs
import pytest

MIN_OPSET = 13  # graph/opsets.h
# Ops onnxruntime registers in the ai.onnx domain that are no onnx operator.
ORT_ONNX_DOMAIN_OPS = {"SimplifiedLayerNormalization"}


def registry(onebit: str) -> dict[str, list[tuple[int, int]]]:
    out = subprocess.run([onebit, "inspect", "--ops"], check=True, capture_output=True, text=True).stdout
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in out.splitlines():
        domain, op, since, until = line.split("\t")
        if domain == "ai.onnx":
            ranges[op].append((int(since), int(until)))
    return ranges


def schema_versions() -> dict[str, list[int]]:
    versions: dict[str, list[int]] = defaultdict(list)
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in ("", "ai.onnx"):
            versions[s.name].append(s.since_version)
    return {k: sorted(v) for k, v in versions.items()}


_cache: dict = {}


def pytest_generate_tests(metafunc):
    if "op" in metafunc.fixturenames:
        onebit = metafunc.config.getoption("onebit")
        _cache["registry"] = registry(onebit)
        metafunc.parametrize("op", sorted(_cache["registry"]))


def test_newest_opset_matches_onnx(onebit):
    top = max(u for spans in registry(onebit).values() for _, u in spans)
    assert top == onnx.defs.onnx_opset_version(), (
        f"the registry reaches opset {top}, onnx {onnx.__version__} defines {onnx.defs.onnx_opset_version()}: "
        "update graph/opsets.h")


def test_op_versions(op):
    spans = sorted(_cache["registry"][op])
    newest = onnx.defs.onnx_opset_version()
    if op in ORT_ONNX_DOMAIN_OPS:
        assert spans == [(1, newest)], f"{op}: onnxruntime's version 1 holds at every opset, entries {spans}"
        return
    versions = schema_versions().get(op)
    assert versions, f"{op}: not an ai.onnx operator of onnx {onnx.__version__}"
    assert spans[-1][1] == newest, f"{op}: entries {spans} stop before opset {newest}"
    for (_, u), (s, _) in zip(spans, spans[1:]):
        assert s == u + 1, f"{op}: entries {spans} leave a gap or overlap at {u}..{s}"
    starts = {s for s, _ in spans}
    first = spans[0][0]
    # The first entry starts at a schema version (an older op's since may lie
    # below the oldest opset 1bit implements): the one in force at that
    # opset, or the op's first when it is newer.
    assert first in versions, f"{op}: the first entry starts at {first}, not a schema version ({versions})"
    in_force = max([v for v in versions if v <= MIN_OPSET], default=versions[0])
    assert first <= in_force, (f"{op}: the first entry starts at {first}, so a model at opset {MIN_OPSET} "
                               f"(schema version {in_force}) finds no kernel")
    missing = [v for v in versions if max(first, MIN_OPSET) < v <= newest and v not in starts]
    assert not missing, (f"{op}: schema versions {missing} have no entry of their own "
                         f"(entries {spans}, schema versions {versions})")
