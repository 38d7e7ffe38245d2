"""How much of a QDQ export 1bit fuses (scripts/qdq_coverage.py), as tests:
`ONEBIT_QDQ_DEBUG=1 1bit run` on the --model, its fusion report read against
the graph. One test per check and model:

  test_check[model-qdq-quark.onnx-run]             the run succeeds
  ...-report           the report has a `qdq_fused` line
  ...-candidates       fused + refused = the MatMuls with a DequantizeLinear input
  ...-refusal_lines    the per-reason refusal lines add up to the refused count
  ...-refusal_reasons  every refusal names its reason
  ...-expect_groups    exactly --expect-groups groups fused (skipped without the option)
  ...-no_refusals      nothing refused (with --no-refusals; skipped without)

  pytest scripts/tests/test_qdq_coverage.py --onebit build/1bit --model M.onnx --expect-groups 15 --no-refusals
"""
from __future__ import annotations

import pytest

import qdq_coverage
from conftest import models

CHECKS = ["run", "report", "candidates", "refusal_lines", "refusal_reasons", "expect_groups", "no_refusals"]
TOKENS = 4


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        paths = models(metafunc.config, [])
        if not paths:
            raise pytest.UsageError("test_qdq_coverage.py needs --model (a QDQ export)")
        metafunc.parametrize("case", [(p, c) for p in paths for c in CHECKS],
                             ids=[f"{p.name}-{c}" for p in paths for c in CHECKS])


_results: dict = {}


def result(onebit: str, model, config) -> dict[str, str]:
    if model not in _results:
        census = qdq_coverage.graph_matmuls(model)
        report, stderr, rc = qdq_coverage.run_report(onebit, model, TOKENS)
        print(f"{model.name}: MatMuls {census['matmuls']} ({census.get('both_dq', 0)} DQ on both inputs, "
              f"{census.get('one_dq', 0)} on one, {census.get('float', 0)} float); report {report}")
        _results[model] = qdq_coverage.problems(census, report, stderr, rc, config.getoption("expect_groups"),
                                                config.getoption("no_refusals"))
    return _results[model]


def test_check(case, onebit, pytestconfig):
    model, check = case
    if check == "expect_groups" and pytestconfig.getoption("expect_groups") is None:
        pytest.skip("no --expect-groups")
    if check == "no_refusals" and not pytestconfig.getoption("no_refusals"):
        pytest.skip("no --no-refusals")
    problems = result(onebit, model, pytestconfig)
    assert check not in problems, problems[check]
