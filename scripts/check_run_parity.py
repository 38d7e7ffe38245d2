#!/usr/bin/env python3
"""Run one graph with `1bit run` and with onnxruntime on the same inputs and
compare every output: rel = max|1bit - ort| / max|ort| must be <= --tol.

Inputs are made from the graph's declared inputs: token ids for int inputs
named like ids, a causal attention mask of ones, positions continuing the
cache, and a random cache (normal, scaled) for past inputs, so the cached
graph is checked with a non-empty past as well as an empty one.

  check_run_parity.py --onebit build/1bit --model m.onnx [--seq 7] [--past 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64, 9: np.bool_}


def make_inputs(model_path, seq, past, seed):
    m = onnx.load(model_path, load_external_data=False)
    rng = np.random.default_rng(seed)
    inputs = {}
    for vi in m.graph.input:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        dtype = TYPES[tt.elem_type]
        name = vi.name
        if name == "input_ids":
            # The declared vocabulary (an export may leave the logits shape out).
            ldims = next((o.type.tensor_type.shape.dim for o in m.graph.output if o.name == "logits"), [])
            vocab = ldims[-1].dim_value if len(ldims) and ldims[-1].dim_value > 0 else 1000
            inputs[name] = rng.integers(0, max(vocab, 2), size=(1, seq)).astype(dtype)
        elif name == "attention_mask":
            inputs[name] = np.ones((1, past + seq), dtype=dtype)
        elif name == "position_ids":
            inputs[name] = np.arange(past, past + seq, dtype=dtype)[None, :]
        elif name == "past" or name.startswith("past_key_values"):
            shape = [d if d is not None else past for d in dims]
            shape[0] = dims[0] if dims[0] is not None else 1
            inputs[name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
        else:
            shape = [d if d is not None else seq for d in dims]
            if np.issubdtype(dtype, np.floating):
                inputs[name] = rng.standard_normal(shape).astype(dtype)
            else:
                inputs[name] = rng.integers(0, 8, size=shape).astype(dtype)
    return inputs


def run_onebit(onebit, model, inputs, extra):
    with tempfile.TemporaryDirectory() as tmp:
        args = [onebit, "run", model, "-o", tmp] + extra
        for name, arr in inputs.items():
            path = os.path.join(tmp, f"in_{name}.npy")
            np.save(path, arr)
            args += ["--input", f"{name}={path}"]
        subprocess.run(args, check=True)
        out = {}
        for f in os.listdir(tmp):
            if f.endswith(".npy") and not f.startswith("in_"):
                out[f[:-4]] = np.load(os.path.join(tmp, f))
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq", type=int, default=7)
    ap.add_argument("--past", type=int, nargs="*", default=[0, 5], help="past lengths to try (cached graphs)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--onebit-arg", action="append", default=[], help="extra argument for `1bit run`")
    ap.add_argument("--ort-opt", choices=["all", "basic", "disable"], default="all",
                    help="onnxruntime graph optimizations (disable: node by node, the reference for QDQ graphs)")
    args = ap.parse_args()

    names = [i.name for i in onnx.load(args.model, load_external_data=False).graph.input]
    cached = any(n == "past" or n.startswith("past_key_values") for n in names)
    so = ort.SessionOptions()
    so.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                   "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}[args.ort_opt]
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    worst = 0.0
    ok = True
    for past in args.past if cached else [0]:
        inputs = make_inputs(args.model, args.seq, past, args.seed + past)
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
        got = run_onebit(args.onebit, args.model, inputs, args.onebit_arg)
        for name, ref in want.items():
            key = name.replace("/", "_").replace(":", "_")
            if key not in got:
                print(f"FAIL {name}: 1bit wrote no output")
                ok = False
                continue
            out = got[key]
            if out.shape != ref.shape:
                print(f"FAIL {name}: shape {out.shape}, onnxruntime {ref.shape}")
                ok = False
                continue
            scale = float(np.max(np.abs(ref))) if ref.size else 0.0
            diff = float(np.max(np.abs(out.astype(np.float64) - ref))) if ref.size else 0.0
            rel = diff / scale if scale > 0 else diff
            worst = max(worst, rel)
            status = "ok" if rel <= args.tol else "FAIL"
            ok &= rel <= args.tol
            print(f"{status} {name} past={past} seq={args.seq} shape={list(ref.shape)} max|d|={diff:.3e} "
                  f"max|ort|={scale:.3e} rel={rel:.3e} (tol {args.tol:g})")
    print(f"parity {'passed' if ok else 'FAILED'}: worst rel {worst:.3e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
