"""Lookup decoding's speed-up: `1bit ort-run --lookup N` against the plain
greedy run on the same model, prompts and token counts, in one run.

Prompts that repeat their input (a code edit, a quoted summary, a list
continued) and prompts that do not (a story, an explanation). Each
configuration runs --reps times alternating with its plain twin; the table
gives the median generation time (prefill + decode) and decode ms per
generated token, the speed-up, the passes per token and the share of
drafted tokens kept. The tokens are checked equal to the plain run's.

  .venv/bin/python scripts/bench_lookup.py build-models/smollm2-135m/model-cached-q4.onnx --threads 1 2
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from onebit_tools.cli import default_onebit

CODE = '''def area(shape, w, h):
    if shape == "rect":
        return w * h
    if shape == "tri":
        return w * h / 2
    raise ValueError(shape)


def perimeter(shape, w, h):
    if shape == "rect":
        return 2 * (w + h)
    raise ValueError(shape)
'''

PROMPTS = {
    # repeating: the answer copies long runs of the prompt
    "code edit": "Add type hints to every function below and return the whole file.\n\n" + CODE,
    "quote": ("Repeat the following paragraph exactly, then say how many sentences it has.\n\n"
              "The river rose for three days. The bridge held until the fourth morning. "
              "By noon the village had moved to the hill, and the bells rang for an hour."),
    "list": "Continue the list in the same format:\n1. apple - red\n2. banana - yellow\n3. grape - purple\n4. lime - green\n5.",
    # not repeating (the default model's answers to these do not fall into loops within 64 tokens)
    "capital": "What is the capital of Australia and why was it chosen?",
    "guitar": "Give three tips for learning to play the guitar.",
}
REPEATING = {"code edit", "quote", "list"}


def run(onebit, model, prompt, n, threads, lookup):
    cmd = [onebit, "ort-run", model, "--chat", "--prompt", prompt, "-n", str(n), "--threads", str(threads),
           "--lookup", str(lookup), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--onebit", default=default_onebit())
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--lookup", type=int, nargs="+", default=[4, 8])
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", nargs="+", choices=list(PROMPTS), default=list(PROMPTS))
    a = ap.parse_args()

    print(f"model {a.model}, {a.n} new tokens, median of {a.reps} (alternating with the plain run)\n")
    print("| threads | prompt | kind | tokens | plain ms | " + " | ".join(
        f"--lookup {k} ms | speed-up | passes/token | kept" for k in a.lookup) + " |")
    print("|---:|---|---|---:|---:|" + "---:|---:|---:|---:|" * len(a.lookup))
    for t in a.threads:
        for name in a.prompts:
            prompt = PROMPTS[name]
            times = {k: [] for k in [0, *a.lookup]}
            last = {}
            for _ in range(a.reps):
                for k in times:
                    r = run(a.onebit, a.model, prompt, a.n, t, k)
                    times[k].append(r["timings"]["prefill_ms"] + r["timings"]["decode_ms"])
                    last[k] = r
            plain = last[0]
            cells = []
            for k in a.lookup:
                r = last[k]
                if r["generated_ids"] != plain["generated_ids"]:
                    sys.exit(f"--lookup {k} parted from greedy on {name!r} at {t} threads")
                ms, base = statistics.median(times[k]), statistics.median(times[0])
                toks = len(r["generated_ids"])
                d = r["lookup"]
                cells.append(f"{ms:.0f} | {base / ms:.2f}x | {r['passes'] / toks:.2f} | "
                             f"{d['accepted']}/{d['drafted']}")
            print(f"| {t} | {name} | {'repeats' if name in REPEATING else 'new text'} | "
                  f"{len(plain['generated_ids'])} | {statistics.median(times[0]):.0f} | " + " | ".join(cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
