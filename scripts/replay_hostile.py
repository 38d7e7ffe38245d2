#!/usr/bin/env python3
"""Replays the models tests/test_hostile_inputs.cpp writes (build/test-scratch/
hostile_*/model.onnx) through one or more 1bit binaries with `1bit run`, on
inputs of ones of each declared shape (symbolic dims = 1), and prints how
each binary ended: exit code, or the signal that killed it. docs/reliability.md
records a run against the binary built from the commit before the hardening.

  scripts/replay_hostile.py build/test-scratch /tmp/1bit-old build/1bit
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx

DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16}


def inputs_for(model_path, work):
    m = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    args = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
        a = np.ones(shape, dtype=DTYPES.get(t.elem_type, np.float32))
        p = work / f"{len(args)}.npy"
        np.save(p, a)
        args += ["-i", f"{vi.name}={p}"]
    return args


def ending(rc):
    return f"signal {-rc}" if rc < 0 else f"exit {rc}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scratch", type=pathlib.Path)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    models = sorted(a.scratch.glob("hostile_*/model.onnx"))
    if not models:
        sys.exit(f"no hostile_*/model.onnx under {a.scratch} (run tests/test_hostile_inputs first)")
    print("model | " + " | ".join(a.binaries))
    for model in models:
        row = [model.parent.name]
        with tempfile.TemporaryDirectory() as tmp:
            work = pathlib.Path(tmp)
            try:
                args = inputs_for(model, work)
            except Exception as e:  # a model onnx itself cannot read: note it, replay without inputs
                args = []
                row[0] += f" (onnx: {type(e).__name__})"
            for b in a.binaries:
                out = work / pathlib.Path(b).name
                out.mkdir(exist_ok=True)
                try:
                    r = subprocess.run([b, "run", str(model), *args, "-o", str(out), "--threads", "1"],
                                       capture_output=True, text=True, timeout=a.timeout)
                    msg = (r.stderr.strip().splitlines() or [""])[-1][:90]
                    row.append(f"{ending(r.returncode)}: {msg}" if r.returncode else "exit 0")
                except subprocess.TimeoutExpired:
                    row.append(f"timeout {a.timeout:g}s")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
