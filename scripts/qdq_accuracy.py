#!/usr/bin/env python3
"""int8 accuracy on a real model: the qdq exports and qd8 (`--int8`) against
float, and the fused QDQ groups against the same graph run node by node.

The qdq format is A8W8 QDQ: int8 activations and int8 weights in
QuantizeLinear/DequantizeLinear pairs, static scales (scripts/quantize_qdq.py).
qd8 is 1bit's dynamic int8 path: float graphs, activations quantized per row
at run time (`1bit ... --int8`).

Variants (each an uncached + cached pair of graphs in --model-dir; a missing
pair is skipped with a note):

  qdq per-tensor     model[-cached]-qdq-quark-pt.onnx
  qdq per-channel    model[-cached]-qdq-quark-pc.onnx
  qd8                the float graphs with `1bit ... --int8`

Per variant, over the prompts of scripts/q4_accuracy.py, -n greedy steps each:

  forced   teacher forcing: the uncached graph runs once over the prompt +
           the float model's greedy tokens (`1bit run`), every position's
           next-token distribution against the float graph's on the same
           ids: mean KL(float || variant) in nats and top-1 agreement.
  greedy   the cached graph decodes on its own (`1bit ort-run --cached`):
           the first step whose token differs from the float run's.
  fused vs unfused (QDQ exports only), on the forced ids: the fused run
           against the same graph with ONEBIT_QDQ=0 (each DequantizeLinear,
           MatMul and QuantizeLinear run as a node, in float) and against
           onnxruntime with ORT_DISABLE_ALL (the same node-by-node
           semantics): mean and max KL, top-1 agreement, max abs logit
           difference, over every position of prompt + continuation; and
           the greedy decode with ONEBIT_QDQ=0: steps with the same token.

  qdq_accuracy.py --onebit build/1bit --model-dir build-models/smollm2-135m --work /tmp/qdqacc -n 64
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from onebit_tools import cli
from parity import compare
from q4_accuracy import PROMPTS, float_dumps, forced_logits, kl_top1

VARIANTS = {
    "qdq per-tensor (Quark)": ("-qdq-quark-pt", []),
    "qdq per-channel (Quark)": ("-qdq-quark-pc", []),
    "qd8 (--int8)": ("", ["--int8"]),
}


def ort_logits(model: Path, ids_file: Path) -> np.ndarray:
    from onebit_tools.ort import session

    sess = session(model, opt="disable", quiet=True)
    return sess.run(["logits"], {"input_ids": np.load(ids_file)})[0][0]


def pair_stats(ref: np.ndarray, got: np.ndarray) -> dict:
    kl, top1 = kl_top1(ref, got)
    return {"kl": kl.tolist(), "top1": top1.tolist(), "max_abs": float(np.abs(ref.astype(np.float64) - got).max())}


def greedy(args, model: Path, prompt: str, extra: list[str], dump: Path, env: dict | None = None):
    d = cli.ort_run(args.onebit, model, ["--prompt", prompt], args.n, dump,
                    ["--cached", "--threads", str(args.threads)] + extra, env=env)
    return d.logits, d.ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("-n", type=int, default=64, help="greedy steps per prompt")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write the markdown tables here")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.onebit = str(Path(args.onebit).resolve())

    refs = float_dumps(args, args.work)
    for i, r in enumerate(refs):
        full = forced_logits(args, args.model_dir / "model.onnx", args.work / f"ids-{i}.npy", [])
        r["forced"] = full[r["prompt_len"] - 1: r["prompt_len"] - 1 + r["steps"]]
        r["greedy_ids"] = np.load(args.work / f"float-{i}.ids.npy")

    acc_rows, qdq_rows = [], []
    for name, (suffix, extra) in VARIANTS.items():
        plain, cached = (args.model_dir / f"{g}{suffix}.onnx" for g in ("model", "model-cached"))
        if not plain.exists() or not cached.exists():
            print(f"note: {name}: {plain.name} or {cached.name} missing, skipped", flush=True)
            continue
        f_kl, f_top1, first_miss = [], [], []
        same, steps, pairs = 0, 0, {}
        for i, r in enumerate(refs):
            got = forced_logits(args, plain, args.work / f"ids-{i}.npy", extra)
            kl, top1 = kl_top1(r["forced"], got[r["prompt_len"] - 1: r["prompt_len"] - 1 + r["steps"]])
            f_kl.extend(kl.tolist())
            f_top1.extend(top1.tolist())
            logits, ids = greedy(args, cached, r["prompt"], extra, args.work / f"g-{i}.npy")
            n = min(len(ids), len(r["greedy_ids"]))
            diff = np.nonzero(ids[:n] != r["greedy_ids"][:n])[0]
            first_miss.append(int(diff[0]) if len(diff) else n)
            if suffix:  # fused (above) against ONEBIT_QDQ=0 and onnxruntime on the same graph
                env = {"ONEBIT_QDQ": "0"}
                ref, ref_ids = greedy(args, cached, r["prompt"], extra, args.work / f"u-{i}.npy", env)
                c = compare(ref, ref_ids, logits, ids)
                same += c["same_ids"]
                steps += c["steps"]
                for key, ref_full in (("unfused", forced_logits(args, plain, args.work / f"ids-{i}.npy", extra, env)),
                                      ("ort", ort_logits(plain, args.work / f"ids-{i}.npy"))):
                    st = pair_stats(ref_full, got)
                    acc = pairs.setdefault(key, {"kl": [], "top1": [], "max_abs": 0.0})
                    acc["kl"] += st["kl"]
                    acc["top1"] += st["top1"]
                    acc["max_abs"] = max(acc["max_abs"], st["max_abs"])
        row = {"variant": name, "forced_kl": float(np.mean(f_kl)), "forced_top1": float(np.mean(f_top1)),
               "first_miss": first_miss, "steps": len(f_kl)}
        acc_rows.append(row)
        print(json.dumps(row), flush=True)
        if suffix:
            for key, acc in pairs.items():
                q = {"variant": name, "against": key, "positions": len(acc["kl"]), "mean_kl": float(np.mean(acc["kl"])),
                     "max_kl": float(np.max(acc["kl"])), "top1": float(np.mean(acc["top1"])), "max_abs": acc["max_abs"],
                     "greedy_same": same, "greedy_steps": steps}
                qdq_rows.append(q)
                print(json.dumps(q), flush=True)

    lines = ["| variant | forced mean KL vs float | forced top-1 | first different greedy token (per prompt) |",
             "|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['forced_kl']:.5f} | {r['forced_top1'] * 100:.1f}% | "
              f"{', '.join(map(str, r['first_miss']))} |" for r in acc_rows]
    names = {"unfused": "1bit, ONEBIT_QDQ=0", "ort": "onnxruntime, ORT_DISABLE_ALL"}
    lines += ["", "| graph | fused against (forced ids) | positions | mean KL | max KL | top-1 | max abs logit diff | "
              "same greedy token vs ONEBIT_QDQ=0 |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {q['variant']} | {names[q['against']]} | {q['positions']} | {q['mean_kl']:.2e} | {q['max_kl']:.2e} | "
              f"{q['top1'] * 100:.1f}% | {q['max_abs']:.4g} | {q['greedy_same']}/{q['greedy_steps']} |" for q in qdq_rows]
    table = "\n".join(lines)
    print(f"\n{len(refs)} prompts, {sum(r['steps'] for r in refs)} steps\n\n{table}")
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
