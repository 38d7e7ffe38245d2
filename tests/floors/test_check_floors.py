#!/usr/bin/env python3
"""check_floors.py must fail, naming the file and line, on a planted upward
include, and pass on the same tree without it.

    test_check_floors.py CHECK_FLOORS.py ARCHITECTURE.md
"""
import pathlib
import subprocess
import sys
import tempfile


def run(check: str, root: pathlib.Path, doc: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, check, "--root", str(root), "--doc", doc], capture_output=True, text=True)


def main() -> int:
    check, doc = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "base").mkdir()
        (root / "graph" / "passes").mkdir(parents=True)
        (root / "base" / "error.h").write_text("#pragma once\n")
        (root / "graph" / "passes" / "fold.cpp").write_text('#include "base/error.h"\n#include "graph/graph.h"\n')
        clean = run(check, root, doc)
        if clean.returncode != 0:
            print("a tree whose includes all point down failed:\n" + clean.stdout + clean.stderr)
            return 1
        # base/ is the ground floor: it may not include the graph floor.
        (root / "base" / "dtype.h").write_text('#pragma once\n\n#include "graph/tensor.h"\n')
        planted = run(check, root, doc)
        want = 'base/dtype.h:3: base/ (floor 0) includes "graph/tensor.h" from graph/'
        if planted.returncode == 0 or want not in planted.stdout:
            print(f"the planted upward include was not reported as '{want}...':\n" + planted.stdout + planted.stderr)
            return 1
    print("check_floors passes a clean tree and names the planted upward include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
