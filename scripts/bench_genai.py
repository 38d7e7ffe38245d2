#!/usr/bin/env python3
"""1bit beside onnxruntime-genai's own generator on an onnxruntime-genai
model folder: the same files, the same prompt ids, the same token counts.

Per repetition, back to back, each engine in its own process (so its peak
RSS and load time are its own), the order alternating: `1bit bench DIR`
and onnxruntime-genai (og.Model, og.Generator, greedy, EOS masked by
min_length so every run makes --gen tokens). Reported per prompt length:
prefill tok/s (the prompt's forward pass: 1bit's prefill, og's
append_tokens), decode ms/token (mean over the steps after the first),
peak RSS and load time; medians over the repetitions.

  bench_genai.py --onebit build/1bit --model build-models/genai-int4 --prompt-lengths 32,256 --gen 64 --reps 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def prompt_ids(n: int, vocab: int) -> list[int]:
    return [100 + (i * 7919) % (vocab - 200) for i in range(n)]


def og_folder(model_dir: str, threads: int, tmp: Path) -> str:
    """The folder as is, or (threads > 0) a copy of it by symlinks whose
    genai_config.json sets onnxruntime's intra-op threads."""
    if not threads:
        return model_dir
    src = Path(model_dir).resolve()
    for f in src.iterdir():
        if f.name != "genai_config.json":
            (tmp / f.name).symlink_to(f)
    cfg = json.loads((src / "genai_config.json").read_text())
    cfg["model"]["decoder"].setdefault("session_options", {})["intra_op_num_threads"] = threads
    (tmp / "genai_config.json").write_text(json.dumps(cfg))
    return str(tmp)


def og_worker(model_dir: str, lengths: list[int], gen: int, threads: int) -> dict:
    import onnxruntime_genai as og

    tmp = Path(tempfile.mkdtemp(prefix="og-"))
    model_dir = og_folder(model_dir, threads, tmp)
    t0 = time.perf_counter()
    model = og.Model(model_dir)  # threads 0: onnxruntime's default, the machine's cores
    load_s = time.perf_counter() - t0
    vocab = json.loads((Path(model_dir) / "genai_config.json").read_text())["model"]["vocab_size"]
    rows = []
    for p in lengths:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=p + gen, min_length=p + gen)
        g = og.Generator(model, params)
        t = time.perf_counter()
        g.append_tokens(prompt_ids(p, vocab))
        g.generate_next_token()  # the first token, from the prompt's logits
        prefill_ms = (time.perf_counter() - t) * 1000
        steps = []
        while not g.is_done():
            t = time.perf_counter()
            g.generate_next_token()
            steps.append((time.perf_counter() - t) * 1000)
        rows.append({"prompt": p, "gen": len(steps) + 1, "prefill_ms": prefill_ms,
                     "decode_ms_per_token": statistics.mean(steps)})
    return {"engine": "onnxruntime-genai", "load_s": load_s, "rows": rows,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def onebit(binary: str, model: str, lengths: list[int], gen: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [binary, "bench", model, "--prompt-lengths", ",".join(map(str, lengths)), "--gen", str(gen),
               "--json", str(out)]
        if threads:
            cmd += ["--threads", str(threads)]
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        d = json.loads(out.read_text())
    d["engine"] = "1bit"
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=False)
    ap.add_argument("--model", required=True, help="an onnxruntime-genai model folder")
    ap.add_argument("--prompt-lengths", default="32,256")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for both (1bit --threads, onnxruntime's intra_op_num_threads); 0: each one's default, the machine's cores")
    ap.add_argument("--out", help="write every run as JSON")
    ap.add_argument("--og-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    lengths = [int(x) for x in args.prompt_lengths.split(",")]
    if args.og_worker:
        print(json.dumps(og_worker(args.model, lengths, args.gen, args.threads)))
        return
    runs = {"1bit": [], "onnxruntime-genai": []}
    for rep in range(args.reps):
        order = ["1bit", "onnxruntime-genai"] if rep % 2 == 0 else ["onnxruntime-genai", "1bit"]
        for engine in order:
            if engine == "1bit":
                runs[engine].append(onebit(args.onebit, args.model, lengths, args.gen, args.threads))
            else:
                cmd = [sys.executable, __file__, "--og-worker", "--model", args.model, "--prompt-lengths",
                       args.prompt_lengths, "--gen", str(args.gen), "--threads", str(args.threads)]
                r = subprocess.run(cmd, check=True, capture_output=True, text=True)
                runs[engine].append(json.loads(r.stdout.strip().splitlines()[-1]))
            runs[engine][-1]["load_avg"] = os.getloadavg()[0]
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))
    print(f"model {args.model}, gen {args.gen}, threads {args.threads or 'default'}, {args.reps} reps (medians), "
          f"load average {statistics.median(r['load_avg'] for rs in runs.values() for r in rs):.2f}")
    print(f"{'engine':<20} {'prompt':>6} {'prefill tok/s':>14} {'decode ms/tok':>14} {'peak RSS MiB':>13} {'load s':>7}")
    for engine, rs in runs.items():
        for i, p in enumerate(lengths):
            pre = statistics.median(p / (r["rows"][i]["prefill_ms"] / 1000) for r in rs)
            dec = statistics.median(r["rows"][i]["decode_ms_per_token"] for r in rs)
            rss = statistics.median(r["peak_rss_mib"] for r in rs)
            load = statistics.median(r["load_s"] for r in rs)
            print(f"{engine:<20} {p:>6} {pre:>14.1f} {dec:>14.2f} {rss:>13.0f} {load:>7.2f}")


if __name__ == "__main__":
    main()
