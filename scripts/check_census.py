#!/usr/bin/env python3
"""`1bit inspect --json` against scripts/onnx_census.py (the onnx package's
own count) on the same files: every field must agree.

  check_census.py --onebit build/1bit MODEL [MODEL ...]
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_census  # noqa: E402

FIELDS = ["ir_version", "nodes", "matmuls", "constant_weight_matmuls", "opsets", "op_counts", "weight_shapes",
          "custom_domains", "initializers", "initializer_bytes", "inputs", "outputs"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    ok = True
    for model in args.models:
        ours = json.loads(subprocess.run([args.onebit, "inspect", "--json", model], check=True, capture_output=True,
                                         text=True).stdout)
        theirs = json.loads(json.dumps(onnx_census.census(model)))
        for field in FIELDS:
            a, b = ours.get(field), theirs.get(field)
            same = a == b
            ok &= same
            print(f"{'ok  ' if same else 'DIFF'} {Path(model).name}: {field}" + ("" if same else f": 1bit {a} vs onnx {b}"))
        print(f"{Path(model).name}: {ours['matmuls']} MatMul, {len(ours['weight_shapes'])} distinct weight shapes, "
              f"{ours['nodes']} nodes")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
