"""The session-kept KV cache (graph/kv_state.cpp) against the exported one:
`1bit ort-run` on a cached export, by default (the cache stays in the
session, appended in place) and with ONEBIT_KV_STATE=0 (the exported
Concats, `present` fed back as `past`), must choose the same tokens with
bit-identical logits; the default run must really use the state (KvAppend
nodes in its profile), the ONEBIT_KV_STATE=0 run must not. Its steady decode
steps grow their plan as the step before did, reshaping nothing (the
profile's count), and give the logits of a run with ONEBIT_PLAN_REGROW=0,
whose patches reshape node by node, bit for bit.

  pytest scripts/tests/test_kv_state.py --onebit build/1bit --model DIR/model-cached.onnx --layers 2

Default --model: the tiny export's model-cached.onnx (--tiny); ctest runs
it on the float16 export (model-cached-f16.onnx) too, whose attention over
the state rounds as the float16 nodes over the exported cache round.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import models, tiny
from onebit_tools import cli

# Long enough for several of the fused attention's blocks of 32 rows, each
# leaving out its causal half (ops/gqa_matmul.cpp).
PROMPT = " ".join(["The quick brown fox jumps over the lazy dog."] * 8)
STEPS = 40


def profile_nodes(profile: str, op: str) -> int:
    m = re.search(rf"^\s+{re.escape(op)}\s+[\d.]+ ms\s+[\d.]+%\s+(\d+) nodes", profile, re.M)
    return int(m.group(1)) if m else 0


@pytest.fixture(scope="module")
def runs(onebit, pytestconfig, tmp_path_factory):
    (model,) = models(pytestconfig, [tiny(pytestconfig) / "model-cached.onnx"])
    tmp = tmp_path_factory.mktemp("kv_state")
    out = {}
    for name, env in (("state", {}), ("plain", {"ONEBIT_KV_STATE": "0"}), ("reshaped", {"ONEBIT_PLAN_REGROW": "0"})):
        out[name] = cli.ort_run(onebit, model, ["--prompt", PROMPT], STEPS, tmp / f"{name}.npy",
                                env={"ONEBIT_PROFILE": "1", **env}, capture_stderr=True)
    s, p = out["state"], out["plain"]
    print(f"KvAppend nodes: {profile_nodes(s.stderr, 'com.onebit::KvAppend')}; cache Concats left: "
          f"{profile_nodes(s.stderr, 'Concat')} (exported: {profile_nodes(p.stderr, 'Concat')})")
    return out


def test_state_run_appends_in_place(runs, pytestconfig):
    want = 2 * pytestconfig.getoption("layers")
    got = profile_nodes(runs["state"].stderr, "com.onebit::KvAppend")
    assert got == want, f"KvAppend nodes in the profile: {got}, want 2 x {want // 2} layers = {want}"


def test_exported_run_has_no_state(runs):
    assert profile_nodes(runs["plain"].stderr, "com.onebit::KvAppend") == 0


def regrown(profile: str) -> int:
    m = re.search(r"; (\d+) grown as the step before, reshaping nothing", profile)
    assert m, "no patch line in the profile"
    return int(m.group(1))


def test_steady_steps_reshape_nothing(runs):
    # The prompt's plan is the one reserved; the first step patches the plan
    # reserved for the last one down, the second records +1, the rest repeat it.
    assert regrown(runs["state"].stderr) == STEPS - 3
    assert regrown(runs["reshaped"].stderr) == 0
    s, r = runs["state"].logits, runs["reshaped"].logits
    assert np.array_equal(s, r), f"max |d| {np.max(np.abs(s - r)):.3g}"


def test_steps(runs):
    assert len(runs["state"].ids) == STEPS, f"the state run made {len(runs['state'].ids)} steps, want {STEPS}"


def test_same_tokens(runs):
    s, p = runs["state"], runs["plain"]
    assert np.array_equal(s.ids, p.ids), f"state {s.ids.tolist()}\nplain {p.ids.tolist()}"


def test_bit_identical_logits(runs):
    s, p = runs["state"].logits, runs["plain"].logits
    assert s.shape == p.shape, f"logits {s.shape} vs {p.shape}"
    assert np.array_equal(s, p), f"max |d| {np.max(np.abs(s - p)):.3g}"
