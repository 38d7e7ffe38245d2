#!/usr/bin/env python3
"""q4 accuracy guard: 1bit on 4-bit weight-only models (Q4NX files written by
`1bit pack`) against 1bit on the float model.

For each weight layout (`1bit pack` --block 32, --block 128, --per-channel)
and each activation precision (int8-row, int8-block, float), over several
prompts of -n greedy steps each:

  greedy   the packed cached graph decodes greedily on its own
           (`1bit ort-run --cached`) and scripts/parity.py --compare holds
           its per-step logits against the float model's dump: mean KL
           (float || packed, nats), top-1 agreement, steps until the first
           different token. After a divergence the two runs see different
           text, so these numbers mix quantization error with divergence.
  forced   teacher forcing: the uncached packed graph runs once over the
           prompt + the float model's greedy tokens (`1bit run`), and every
           position's next-token distribution is compared with the float
           graph's on the same ids: mean KL and top-1 agreement on identical
           contexts; and, for the int8 precisions, the KL against the same
           packed weights with float activations (the activation precision's
           own share of the error).

Prints a markdown table (and writes it with --out).

  q4_accuracy.py --onebit build/1bit --model-dir build-models/smollm2-135m --work /tmp/q4acc -n 64
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from onebit_tools import SCRIPTS, cli
from onebit_tools.cli import sh
from parity import log_softmax

PROMPTS = [
    "The history of the Roman Empire began",
    "Here is a short story about a robot who learns to paint:",
    "Photosynthesis is the process by which",
    "def fibonacci(n):",
]
LAYOUTS = {
    "block 32": ["--block", "32"],
    "block 128": ["--block", "128"],
    "per channel": ["--per-channel"],
    "block 32 clip": ["--block", "32", "--clip-search"],
    "block 32 float lm_head": ["--block", "32", "--exclude", "lm_head*"],
}
DEFAULT_LAYOUTS = "block 32,block 128,per channel"
ACTS = ["float", "int8-row", "int8-block"]  # float first: the others are also held against it


def kl_top1(ref: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lp, lq = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lp) * (lp - lq)).sum(-1)
    return kl, ref.argmax(-1) == got.argmax(-1)


def float_dumps(args, work: Path) -> list[dict]:
    """The float model's greedy run per prompt, and its teacher-forced logits."""
    out = []
    for i, prompt in enumerate(PROMPTS[: args.prompts]):
        dump = work / f"float-{i}.npy"
        d = cli.ort_run(args.onebit, args.model_dir / "model-cached.onnx", ["--prompt", prompt], args.n, dump,
                        ["--cached", "--threads", str(args.threads)])
        ids = np.concatenate([d.prompt, d.ids])
        np.save(work / f"ids-{i}.npy", ids[None, :].astype(np.int64))
        out.append({"prompt": prompt, "dump": dump, "ids": ids, "prompt_len": len(d.prompt), "steps": len(d.ids)})
    return out


def forced_logits(args, model: Path, ids_file: Path, extra: list[str], env: dict | None = None) -> np.ndarray:
    """`1bit run` of an uncached graph over the ids in ids_file: logits of every position.

    env: variables set on top of this process's environment.
    """
    r = cli.run(args.onebit, model, {"input_ids": np.load(ids_file)}, ["--threads", str(args.threads)] + extra,
                env=env, echo=True)
    return r.outputs["logits"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--model-dir", type=Path, required=True, help="holds model.onnx and model-cached.onnx (float)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("-n", type=int, default=64, help="greedy steps per prompt")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layouts", default=DEFAULT_LAYOUTS, help="comma-separated subset of: " + ", ".join(LAYOUTS))
    ap.add_argument("--out", type=Path, help="write the markdown table here")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    onebit = Path(args.onebit).resolve()
    args.onebit = str(onebit)

    refs = float_dumps(args, args.work)
    steps = sum(r["steps"] for r in refs)
    # The float model's own forced logits: positions prompt_len-1 .. end-1 predict the greedy tokens.
    for i, r in enumerate(refs):
        full = forced_logits(args, args.model_dir / "model.onnx", args.work / f"ids-{i}.npy",
                             ["--act-precision", "float"])
        r["forced"] = full[r["prompt_len"] - 1: r["prompt_len"] - 1 + r["steps"]]

    rows = []
    for layout in args.layouts.split(","):
        flags = LAYOUTS[layout]
        tag = layout.replace(" ", "")
        packed = {}
        for graph in ("model", "model-cached"):
            packed[graph] = args.work / f"{graph}-{tag}.onnx"
            cli.pack(args.onebit, args.model_dir / f"{graph}.onnx", packed[graph], flags)
            # Side files (tokenizer, config) beside the packed graph, as beside the float one.
            for side in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
                src, dst = args.model_dir / side, args.work / side
                if src.exists() and not dst.exists():
                    dst.symlink_to(src.resolve())
        float_act = {}
        for act in ACTS:
            g_kl, g_top1, g_prefix, g_steps, f_kl, f_top1, a_kl = [], [], [], [], [], [], []
            for i, r in enumerate(refs):
                stats = args.work / "parity.json"
                stats.unlink(missing_ok=True)
                # parity.py exits 1 when the runs stop at different steps (an EOS); its JSON is written either way.
                sh([sys.executable, str(SCRIPTS / "parity.py"), "--onebit", args.onebit, "--model", str(packed["model-cached"]),
                    "--prompt", r["prompt"], "-n", str(args.n), "--compare", str(r["dump"]), "--max-kl", "1e9",
                    "--require-top1", "0", "--json", str(stats), "--onebit-arg=--cached",
                    "--onebit-arg=--act-precision", f"--onebit-arg={act}", f"--onebit-arg=--threads",
                    f"--onebit-arg={args.threads}"], stdout=subprocess.DEVNULL, check=False)
                s = json.loads(stats.read_text())["vs_dump"]
                g_kl.append(s["mean_kl"] * s["steps"])
                g_top1.append(s["top1"] * s["steps"])
                g_prefix.append(s["first_top1_miss"] if s["first_top1_miss"] >= 0 else s["steps"])
                g_steps.append(s["steps"])
                got = forced_logits(args, packed["model"], args.work / f"ids-{i}.npy", ["--act-precision", act])
                got = got[r["prompt_len"] - 1: r["prompt_len"] - 1 + r["steps"]]
                kl, top1 = kl_top1(r["forced"], got)
                f_kl.extend(kl.tolist())
                f_top1.extend(top1.tolist())
                if act == "float":
                    float_act[i] = got
                else:
                    a_kl.extend(kl_top1(float_act[i], got)[0].tolist())
            row = {"layout": layout, "act": act, "steps": steps,
                   "greedy_kl": sum(g_kl) / sum(g_steps), "greedy_top1": sum(g_top1) / sum(g_steps),
                   "first_miss": g_prefix,
                   "forced_kl": float(np.mean(f_kl)), "forced_top1": float(np.mean(f_top1)),
                   "act_kl": float(np.mean(a_kl)) if a_kl else 0.0}
            rows.append(row)
            print(json.dumps(row), flush=True)

    lines = ["| weights | act precision | forced mean KL | forced top-1 | KL vs float act | greedy mean KL | "
             "greedy top-1 | first different token (per prompt) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['act']} | {r['forced_kl']:.4f} | {r['forced_top1'] * 100:.1f}% | "
                     f"{r['act_kl']:.5f} | {r['greedy_kl']:.3f} | {r['greedy_top1'] * 100:.1f}% | "
                     f"{', '.join(str(p) for p in r['first_miss'])} |")
    table = "\n".join(lines)
    print(f"\n{len(refs)} prompts, {steps} greedy steps in all\n\n{table}")
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
