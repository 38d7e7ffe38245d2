#!/usr/bin/env python3
"""4-bit graphs in 1bit against onnxruntime on the same inputs.

Two groups (--group):
  pack    `1bit pack` the float model (int4 block 32, per channel, uint4
          block 64, float16 scales), then for each file: the onnx checker
          passes; onnxruntime loads it; onnxruntime without graph
          optimizations (DequantizeLinear + float MatMul, the reference
          semantics) agrees with `1bit run --act-precision float` within
          --tol (max|d| / max|ort| over the logits); and with ORT_ENABLE_ALL
          the optimized graph is inspected for MatMulNBits (onnxruntime's
          DQ -> MatMul fusion), which is printed.
          float16 scales: DequantizeLinear's output is float16 then, so the
          graph rounds every dequantized weight (q·s, 15 significant bits) to
          float16's 11 before the Cast; 1bit's fused node multiplies in
          float32 and does not. That file is held to --tol against a twin
          whose scales are the same values as float32 (no Cast), and to
          --f16-tol (2⁻¹¹ relative per weight, summed) against itself.
  nbits   onnxruntime's own MatMulNBitsQuantizer (block 32, symmetric and
          with zero points) writes com.microsoft::MatMulNBits; onnxruntime
          (accuracy_level unset: float compute) against 1bit, act=float.

  check_q4_ort.py --onebit build/1bit --model models/qwen3-tiny/model.onnx --work DIR --group pack
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort


def run_onebit(onebit: str, model: str, ids: np.ndarray, work: Path, act: str) -> np.ndarray:
    out = work / "onebit_out"
    out.mkdir(exist_ok=True)
    np.save(work / "ids.npy", ids)
    subprocess.run([onebit, "run", model, "-o", str(out), "--input", f"input_ids={work / 'ids.npy'}",
                    "--act-precision", act], check=True, stdout=subprocess.DEVNULL)
    return np.load(out / "logits.npy")


def run_ort(model: str, ids: np.ndarray, level, optimized: str | None = None) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 2
    if optimized:
        so.optimized_model_filepath = optimized
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": ids})[0]


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - ref)) / max(1e-30, float(np.max(np.abs(ref)))))


def op_counts(path: str) -> dict:
    m = onnx.load(path, load_external_data=False)
    counts: dict = {}
    for n in m.graph.node:
        key = (n.domain + "::" if n.domain else "") + n.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts


def compare(name: str, onebit: str, model: str, ids: np.ndarray, work: Path, tol: float) -> bool:
    ref = run_ort(model, ids, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    got = run_onebit(onebit, model, ids, work, "float")
    r = rel(got, ref)
    same_top1 = float(np.mean(got[0].argmax(-1) == ref[0].argmax(-1)))
    ok = r <= tol
    print(f"{'ok' if ok else 'FAIL'} {name}: 1bit (act float) vs onnxruntime (no optimization) rel {r:.3e} "
          f"(tol {tol:g}), top-1 agreement {same_top1 * 100:.0f}% over {ids.shape[1]} positions", flush=True)
    return ok


def float32_scale_twin(path: Path) -> Path:
    """The same graph with float16 scales widened (exactly) to float32 and the Casts after them dropped."""
    from onnx import numpy_helper

    m = onnx.load(str(path))
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    dq_out = {n.output[0] for n in m.graph.node if n.op_type == "DequantizeLinear"}
    rename = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Cast" and n.input[0] in dq_out}
    keep = [n for n in m.graph.node if not (n.op_type == "Cast" and n.input[0] in dq_out)]
    for n in keep:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    twin = path.with_name(path.stem + "-f32-twin.onnx")
    onnx.save(m, str(twin))
    return twin


def group_pack(args, ids: np.ndarray, work: Path) -> bool:
    ok = True
    variants = {
        "int4-b32": ["--block", "32"],
        "int4-per-channel": ["--per-channel"],
        "uint4-b64": ["--block", "64", "--unsigned"],
        "int4-b32-f16": ["--block", "32", "--scale-type", "float16"],
    }
    for name, flags in variants.items():
        out = work / f"{name}.onnx"
        subprocess.run([args.onebit, "pack", args.model, "-o", str(out), "--quiet"] + flags, check=True)
        onnx.checker.check_model(str(out), full_check=True)
        counts = op_counts(str(out))
        print(f"{name}: {counts.get('DequantizeLinear', 0)} DequantizeLinear, {counts.get('MatMul', 0)} MatMul",
              flush=True)
        if "--scale-type" in flags:
            got = run_onebit(args.onebit, str(out), ids, work, "float")
            twin = float32_scale_twin(out)
            r_twin = rel(got, run_ort(str(twin), ids, ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
            r_self = rel(got, run_ort(str(out), ids, ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
            good = r_twin <= args.tol and r_self <= args.f16_tol
            ok &= good
            print(f"{'ok' if good else 'FAIL'} {name}: 1bit (act float) vs onnxruntime on the float32-scale twin rel "
                  f"{r_twin:.3e} (tol {args.tol:g}); vs the float16 graph itself rel {r_self:.3e} (tol {args.f16_tol:g}: "
                  "its DequantizeLinear rounds weights to float16)", flush=True)
        else:
            ok &= compare(name, args.onebit, str(out), ids, work, args.tol)
        optimized = work / f"{name}.ort-optimized.onnx"
        fused = run_ort(str(out), ids, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, str(optimized))
        oc = op_counts(str(optimized))
        print(f"  onnxruntime ORT_ENABLE_ALL: {oc.get('com.microsoft::MatMulNBits', 0)} MatMulNBits, "
              f"{oc.get('DequantizeLinear', 0)} DequantizeLinear left; its logits vs unoptimized rel "
              f"{rel(fused, run_ort(str(out), ids, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)):.3e}", flush=True)
    return ok


def group_nbits(args, ids: np.ndarray, work: Path) -> bool:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    ok = True
    for symmetric in (True, False):
        name = f"matmulnbits-b32-{'sym' if symmetric else 'zp'}"
        q = MatMulNBitsQuantizer(onnx.load(args.model), bits=4, block_size=32, is_symmetric=symmetric)
        q.process()
        out = work / f"{name}.onnx"
        q.model.save_model_to_file(str(out), use_external_data_format=False)
        counts = op_counts(str(out))
        n = counts.get("com.microsoft::MatMulNBits", 0)
        print(f"{name}: {n} MatMulNBits, {counts.get('MatMul', 0)} MatMul left", flush=True)
        if n == 0:
            print(f"FAIL {name}: the quantizer wrote no MatMulNBits")
            ok = False
            continue
        ok &= compare(name, args.onebit, str(out), ids, work, args.tol)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--model", required=True, help="a float (uncached) model, e.g. the tiny Qwen3 export")
    ap.add_argument("--work", required=True, help="directory for the packed files")
    ap.add_argument("--group", choices=["pack", "nbits"], required=True)
    ap.add_argument("--seq", type=int, default=9)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--f16-tol", type=float, default=4e-3)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    vocab = onnx.load(args.model, load_external_data=False).graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    ids = np.random.default_rng(3).integers(0, max(vocab, 2), size=(1, args.seq)).astype(np.int64)
    ok = group_pack(args, ids, work) if args.group == "pack" else group_nbits(args, ids, work)
    print("q4 vs onnxruntime", "passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
