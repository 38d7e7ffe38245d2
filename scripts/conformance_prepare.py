#!/usr/bin/env python3
"""Prepare the ONNX backend node tests that 1bit runs (ctest: conformance).

The `onnx` package (1.22, pinned in requirements.txt) ships each node test as
model.onnx + test_data_set_*/{input,output}_N.pb. 1bit implements ai.onnx
opsets 13-27 (graph/opsets.h: up to the newest opset onnx 1.22 defines), so
a test at those opsets runs as it is, and one written at an older opset is
converted to opset 21 with onnx.version_converter (same semantics, expressed
at 21); a test the converter cannot bring to 21 is excluded with the
converter's reason. Which tests run at all is the manifest's decision
(tests/conformance.manifest): a test runs when an include pattern matches
it and no exclude pattern does; every exclusion carries its reason.

Writes OUT/index.tsv (test, status, source opset, reason) and, per runnable
test, OUT/<test>/model.onnx with its data sets.
"""
import argparse
import fnmatch
import os
import shutil
import sys

import onnx
from onnx import version_converter

MIN_OPSET, MAX_OPSET = 13, 27  # graph/opsets.h
CONVERT_TO = 21  # older tests are brought to this opset


def read_manifest(path):
    includes, excludes = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].rstrip() if line.lstrip().startswith("#") else line.rstrip()
            if not line.strip():
                continue
            kind, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if kind == "+":
                includes.append(rest)
            elif kind == "-":
                pattern, _, reason = rest.partition(" ")
                if not reason.strip():
                    sys.exit(f"{path}:{n}: exclusion '{pattern}' has no reason")
                excludes.append((pattern, reason.strip()))
            else:
                sys.exit(f"{path}:{n}: expected '+ pattern' or '- pattern reason', got: {line}")
    return includes, excludes


def onnx_opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def tensor_io_only(model):
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            return False
    return True


def prepare(data_dir, out_dir, manifest):
    includes, excludes = read_manifest(manifest)
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for name in sorted(os.listdir(data_dir)):
        if not any(fnmatch.fnmatchcase(name, p) for p in includes):
            continue
        reason = next((r for p, r in excludes if fnmatch.fnmatchcase(name, p)), None)
        src = os.path.join(data_dir, name)
        model = onnx.load(os.path.join(src, "model.onnx"))
        opset = onnx_opset(model)
        if reason:
            rows.append((name, "excluded", opset, reason))
            continue
        if not tensor_io_only(model):
            rows.append((name, "excluded", opset, "sequence or optional inputs/outputs (1bit runs tensors only)"))
            continue
        if opset is None or not (MIN_OPSET <= opset <= MAX_OPSET):
            try:
                model = version_converter.convert_version(model, CONVERT_TO)
            except Exception as e:  # the converter's own reason is the exclusion's reason
                msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
                rows.append((name, "excluded", opset, f"opset {opset}: onnx.version_converter cannot bring it to 21 ({msg})"))
                continue
        dst = os.path.join(out_dir, name)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        os.makedirs(dst)
        onnx.save(model, os.path.join(dst, "model.onnx"))
        for d in sorted(os.listdir(src)):
            if d.startswith("test_data_set_"):
                shutil.copytree(os.path.join(src, d), os.path.join(dst, d))
        rows.append((name, "ready", opset, "" if MIN_OPSET <= (opset or 0) <= MAX_OPSET else f"converted from opset {opset}"))
    with open(os.path.join(out_dir, "index.tsv"), "w", encoding="utf-8") as f:
        for name, status, opset, reason in rows:
            f.write(f"{name}\t{status}\t{opset}\t{reason}\n")
    ready = sum(1 for r in rows if r[1] == "ready")
    print(f"conformance: {ready} tests ready, {len(rows) - ready} excluded, in {out_dir}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (under the build directory)")
    ap.add_argument("--manifest", required=True, help="tests/conformance.manifest")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node"),
                    help="the onnx package's node test data")
    args = ap.parse_args()
    prepare(args.data, args.out, args.manifest)


if __name__ == "__main__":
    main()
