"""Options and fixtures of the Python-driven checks (scripts/tests/).

Paths come in as options, which tests/*.cmake set: the 1bit binary
(--onebit, default $ONEBIT_CLI or build/1bit), the tiny Qwen3 export (--tiny,
default $ONEBIT_TINY or build/models/qwen3-tiny) and the graph a module checks
(--model, repeatable). A case skips only when it has nothing to check
(test_qdq_coverage without --expect-groups) or, without --require-fused, when
1bit lacks the fused QDQ kernel; a run in which no test passed (nothing
collected, all deselected or all skipped) exits 5, which ctest counts as a
failure.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from onebit_tools import REPO
from onebit_tools.cli import default_onebit


def pytest_addoption(parser):
    g = parser.getgroup("onebit")
    g.addoption("--onebit", default=default_onebit(), help="the 1bit binary (default $ONEBIT_CLI, else build/1bit)")
    g.addoption("--tiny", default=os.environ.get("ONEBIT_TINY", str(REPO / "build/models/qwen3-tiny")),
                help="the tiny Qwen3 export of scripts/test_models.py (default $ONEBIT_TINY, else build/models/qwen3-tiny)")
    g.addoption("--genai", default=os.environ.get("ONEBIT_GENAI", str(REPO / "build/models/genai-tiny")),
                help="the onnxruntime-genai builds of scripts/genai_models.py (default $ONEBIT_GENAI, else build/models/genai-tiny)")
    g.addoption("--optimum", default=os.environ.get("ONEBIT_OPTIMUM", str(REPO / "build/models/optimum-tiny")),
                help="scripts/export_optimum.py's export of the --genai checkpoint (default $ONEBIT_OPTIMUM, else build/models/optimum-tiny)")
    g.addoption("--optimum-archs", default=os.environ.get("ONEBIT_OPTIMUM_ARCHS", str(REPO / "build/models/optimum-archs")),
                help="scripts/export_optimum.py's exports of the --genai-archs checkpoints, one folder each")
    g.addoption("--optimum-stack", default="1.23", choices=["1.23", "1.27"],
                help="the export_optimum.py --stack that wrote --optimum-archs (default 1.23)")
    g.addoption("--genai-default", default=os.environ.get("ONEBIT_GENAI_DEFAULT", str(REPO / "build/models/genai-default")),
                help="onnxruntime-genai builds of the default model (scripts/genai_models.py default)")
    g.addoption("--genai-archs", default=os.environ.get("ONEBIT_GENAI_ARCHS", str(REPO / "build/models/genai-archs")),
                help="scripts/genai_models.py archs builds (default $ONEBIT_GENAI_ARCHS, else build/models/genai-archs)")
    g.addoption("--model", action="append", default=[], help="graph to check (repeatable; each module has a default)")
    g.addoption("--onebit-arg", action="append", default=[], help="extra argument for 1bit (repeatable)")
    g.addoption("--work", help="directory for files a check writes and keeps (default: a pytest temporary directory)")
    # test_run_parity, test_q4_ort
    g.addoption("--tol", type=float, default=1e-4, help="relative tolerance: max|1bit - ref| / max|ref|")
    g.addoption("--ort-opt", choices=["all", "basic", "disable"], default="all",
                help="onnxruntime graph optimizations of the reference (disable: node by node, for QDQ graphs)")
    # test_kv_state
    g.addoption("--layers", type=int, default=2, help="decoder layers of the --model (test_kv_state)")
    # test_qdq_exactness
    g.addoption("--require-fused", action="store_true",
                help="a 1bit without the fused QDQ kernel fails instead of skipping")
    g.addoption("--ties-only", action="store_true",
                help="explain only exact ties (DESIGN.md's wording); a bounded crossing then fails")
    g.addoption("--memory-repeats", type=int, default=3, help="runs per side of the memory case (median)")
    # test_npu_e2e
    g.addoption("--designs", help="NPU designs in ONEBIT_NPU_DESIGNS' short form (test_npu_e2e)")
    # test_qdq_coverage
    g.addoption("--expect-groups", type=int, help="fused QDQ groups the --model must have")
    g.addoption("--no-refusals", action="store_true", help="no QDQ group of the --model may be refused")


def pytest_configure(config):
    # pytest makes --basetemp itself, but not its parents (tests/pytest.cmake
    # points it into the build directory's test-scratch/).
    if config.option.basetemp:
        Path(config.option.basetemp).resolve().parent.mkdir(parents=True, exist_ok=True)


def models(config, default: list[Path]) -> list[Path]:
    """The --model paths, or the module's default."""
    return [Path(m) for m in config.getoption("model")] or default


def tiny(config) -> Path:
    return Path(config.getoption("tiny"))


@pytest.fixture(scope="session")
def onebit(pytestconfig) -> str:
    path = pytestconfig.getoption("onebit")
    if not Path(path).is_file():
        pytest.fail(f"1bit binary {path} not found: build it or pass --onebit / set ONEBIT_CLI")
    return str(Path(path).resolve())


@pytest.fixture(scope="session")
def work(pytestconfig, tmp_path_factory) -> Path:
    """--work, or a temporary directory for the session."""
    w = pytestconfig.getoption("work")
    if w is None:
        return tmp_path_factory.mktemp("work")
    Path(w).mkdir(parents=True, exist_ok=True)
    return Path(w)


_passed = 0


def pytest_runtest_logreport(report):
    global _passed
    if report.when == "call" and report.passed:
        _passed += 1


def pytest_sessionfinish(session, exitstatus):
    if session.config.option.collectonly:
        return
    if exitstatus == pytest.ExitCode.OK and _passed == 0:
        print("\nno test passed (all skipped or deselected): exit 5")
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
