#!/usr/bin/env python3
"""1bit beside onnxruntime (and llama.cpp) on one model, in the same run.

Per repetition and thread count, back to back and each in its own process
(so peak RSS is its own): `1bit bench` on the ONNX file,
scripts/bench_ort.py on the same file (CPU EP, ORT_ENABLE_ALL; one engine
per --ort variant, e.g. a session config entry), and, with --gguf,
scripts/bench_llama.py on a GGUF of the same weights. Same synthetic prompt
ids, same prompt lengths, same number of new tokens (EOS ignored, greedy).
The machine is shared: the order of the engines rotates between
repetitions, the load average is recorded beside each run, and the tables
give medians.

GB/s = weight bytes a decode step reads / decode time: for 1bit and
onnxruntime the constant bytes 1bit counts for the graph (weights, scales,
norms; not the embedding table a Gather reads one row of); for llama.cpp
the GGUF's bytes (its tied table is also the lm_head, so all of it is
read). "of limit" divides by the read limit `1bit bench`
measures in the same run (the better of its 8-stream probe and a STREAM-like reduce). An uncached graph re-runs the whole sequence per
step: it reads the weights once per step too, but is bound by compute.

  # float32, cached and uncached (issue: ort-run)
  bench_compare.py --onebit build/1bit --onnx build-models/qwen3-0.6b/model-cached.onnx \\
                   --prompt-lengths 16,64,256,1024 --gen 128 --reps 1 --out bench-f32.json
  # qdq (A8W8 QDQ): onnxruntime as is and with int8 activations allowed in its QDQ fusions
  bench_compare.py --onebit build/1bit --onnx build-models/qwen3-0.6b/model-cached-qdq-quark-pt.onnx \\
                   --ort "onnxruntime int8=--session-config session.qdqisint8allowed=1"
  # Q4NX beside llama.cpp's Q4_0 of the same weights, 1bit also with llama.cpp's float16 KV cache
  bench_compare.py --onebit build/1bit --onnx build-models/qwen3-0.6b/model-cached-q4.onnx \\
                   --gguf build-models/qwen3-0.6b/qwen3-0.6b-q4_0.gguf --prompt-lengths 32,256,1024 --gen 64 \\
                   --onebit-variant "1bit f16 cache=--kv-dtype f16"
  # the same with llama.cpp built without its AMX kernels (they crash on prompts on Xeons with AMX;
  # docs/BENCHMARK.md, "A Xeon with AMX"):
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \\
    -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON \\
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \\
      .venv/bin/pip install --no-cache-dir --no-deps --target build-models/llama-noamx llama-cpp-python==0.3.36
  bench_compare.py ... --llama "llama.cpp=--ubatch 1" --llama "llama.cpp no-AMX=--pythonpath build-models/llama-noamx"
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_avg() -> float:
    return os.getloadavg()[0]


def run_json(cmd: list[str], env: dict | None = None) -> dict:
    """The JSON line a benchmark prints last, or {"error": its last stderr line} when it fails."""
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        if r.returncode < 0:
            return {"error": f"killed by signal {-r.returncode}"}
        last = [line for line in r.stderr.strip().splitlines() if line.strip()]
        return {"error": last[-1] if last else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def onebit_bench(args, threads: int, extra: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [args.onebit, "bench", args.onnx, "--prompt-lengths", args.prompt_lengths, "--gen", str(args.gen),
               "--threads", str(threads), "--json", f.name] + extra
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        return json.loads(Path(f.name).read_text())


def engines(args) -> dict:
    """name -> run(threads) for every engine of this run, in order."""
    py = str(Path(args.python))
    common = ["--prompt-lengths", args.prompt_lengths, "--gen", str(args.gen)]
    run = {"1bit": lambda t: onebit_bench(args, t, args.onebit_arg)}
    for variant in args.onebit_variant:
        name, _, extra = variant.partition("=")
        run[name] = lambda t, extra=extra.split(): onebit_bench(args, t, args.onebit_arg + extra)
    for variant in args.ort or ["onnxruntime"]:
        name, _, extra = variant.partition("=")
        run[name] = lambda t, extra=extra.split(): run_json(
            [py, str(HERE / "bench_ort.py"), args.onnx, *common, "--threads", str(t), *extra])
    if args.gguf:
        for variant in args.llama or ["llama.cpp"]:
            name, _, extra = variant.partition("=")
            extra = extra.split()
            # --pythonpath belongs before bench_llama.py's subcommand.
            pre = extra[extra.index("--pythonpath"):extra.index("--pythonpath") + 2] if "--pythonpath" in extra else []
            extra = [a for a in extra if a not in pre]
            run[name] = lambda t, pre=pre, extra=extra: run_json(
                [py, str(HERE / "bench_llama.py"), *pre, "bench", args.gguf, *common, "--threads", str(t), *extra])
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--onnx", required=True, help="the ONNX causal LM (cached or uncached)")
    ap.add_argument("--gguf", help="a GGUF of the same weights: adds llama.cpp")
    ap.add_argument("--ort", action="append",
                    help="an onnxruntime engine, NAME or NAME=bench_ort.py arguments (default: onnxruntime)")
    ap.add_argument("--prompt-lengths", default="16,64,256,1024")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--onebit-arg", action="append", default=[], help="extra argument for `1bit bench`")
    ap.add_argument("--onebit-variant", action="append", default=[],
                    help='another 1bit row: "NAME=ARGS" for `1bit bench`, e.g. "1bit f16 cache=--kv-dtype f16" '
                         "(llama.cpp's cache dtype)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--llama", action="append",
                    help="a llama.cpp engine (with --gguf), NAME or NAME=bench_llama.py arguments, e.g. "
                         "'llama.cpp no-AMX=--pythonpath build-models/llama-noamx' (default: llama.cpp)")
    ap.add_argument("--out", help="write every run as JSON here")
    args = ap.parse_args()

    run = engines(args)
    names = list(run)
    results: list[dict] = []
    for rep in range(args.reps):
        for t in [int(s) for s in args.threads.split(",")]:
            order = names[rep % len(names):] + names[: rep % len(names)]
            for name in order:
                before = load_avg()
                t0 = time.time()
                res = run[name](t)
                results.append({"engine": name, "threads": t, "rep": rep, "load_before": before,
                                "load_after": load_avg(), "wall_s": time.time() - t0, "result": res})
                if args.out:
                    Path(args.out).write_text(json.dumps(results, indent=1))

    # Medians per engine, thread count and prompt length.
    onebit_bytes = next(r["result"]["weight_bytes"] for r in results if r["engine"] == "1bit")
    bandwidth = {t: statistics.median(r["result"]["bandwidth_gbs"] for r in results
                                      if r["engine"] == "1bit" and r["threads"] == t)
                 for t in {r["threads"] for r in results}}
    lines = ["| threads | engine | prompt | decode ms/token | prefill tok/s | GB/s | of limit | peak RSS MiB | load s "
             "| load avg |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in sorted(bandwidth):
        for name in names:
            runs = [r for r in results if r["engine"] == name and r["threads"] == t]
            failed = [r for r in runs if "error" in r["result"]]
            runs = [r for r in runs if "error" not in r["result"]]
            if failed and not runs:
                lines.append(f"| {t} | {name} | failed: {failed[0]['result']['error'][:200]} |||||||")
            if not runs:
                continue
            wbytes = runs[0]["result"].get("weight_bytes", onebit_bytes) if name.startswith("llama.cpp") else onebit_bytes
            rss = statistics.median(r["result"]["peak_rss_mib"] for r in runs)
            la = statistics.median(r["load_before"] for r in runs)
            load_s = statistics.median(r["result"]["load_s"] for r in runs)
            for p in [int(s) for s in args.prompt_lengths.split(",")]:
                rows = [next(x for x in r["result"]["rows"] if x["prompt"] == p) for r in runs]
                dec = statistics.median(x["decode_ms_per_token"] for x in rows)
                pre = statistics.median(p / (x["prefill_ms"] / 1000) for x in rows)
                gbs = wbytes / (dec / 1000) / 1e9
                lines.append(f"| {t} | {name} | {p} | {dec:.2f} | {pre:.1f} | {gbs:.2f} | "
                             f"{100 * gbs / bandwidth[t]:.0f}% | {rss:.0f} | {load_s:.2f} | {la:.1f} |")
    print("\nstreaming read (1bit bench, median): " + ", ".join(f"{t} thread(s) {b:.1f} GB/s" for t, b in
                                                               sorted(bandwidth.items())))
    llama = next((r["result"]["weight_bytes"] for r in results
                  if r["engine"].startswith("llama.cpp") and "weight_bytes" in r["result"]), 0)
    print(f"weight bytes per decode step: 1bit/onnxruntime {onebit_bytes / 1e6:.1f} MB, llama.cpp {llama / 1e6:.1f} MB")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
