#!/usr/bin/env python3
"""Float MatMul, 1bit's sgemm against onnxruntime, side by side.

For every Qwen3-0.6B projection shape (K, N), M in {1, 128} and 1 or 2
threads, ORT runs a one-MatMul graph whose weight is a constant initializer
(so MLAS pre-packs it, as ours does), and bench/bench_sgemm runs the same
shape. The two are interleaved repetition by repetition and the best
repetition of each is kept, so a busy machine slows both alike. The read
bandwidth of this machine is measured in the same run (bench_sgemm's
read_bandwidth) so the M = 1 rows can be put against it.

    ninja -C build-mm bench_sgemm
    .venv/bin/python scripts/bench_matmul_ort.py --bench build-mm/bench/bench_sgemm

Prints a markdown table (for docs/BENCHMARK.md).
"""
import argparse
import json
import subprocess
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onebit_tools.ort import session

SHAPES = [(1024, 2048), (1024, 1024), (2048, 1024), (1024, 3072), (3072, 1024), (1024, 151936)]


def ort_session(k, n, m, threads):
    rng = np.random.default_rng(2)
    w = rng.uniform(-1, 1, size=(k, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "W"], ["Y"])], "matmul",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    sess = session(model.SerializeToString(), opt="all", threads=threads, inter_threads=1, sequential=True)
    a = rng.uniform(-1, 1, size=(m, k)).astype(np.float32)
    y = np.empty((m, n), np.float32)
    # Bound input and output: no per-call allocation or copy on the Python side.
    io = sess.io_binding()
    io.bind_cpu_input("A", a)
    io.bind_output("Y", "cpu", element_type=np.float32, shape=y.shape, buffer_ptr=y.ctypes.data)
    return sess, io, (a, y)


def time_ort(sess, io, min_time):
    """Seconds per call: wall clock and this process's CPU time."""
    sess.run_with_iobinding(io)
    calls, w0, c0 = 0, time.perf_counter(), time.process_time()
    while True:
        sess.run_with_iobinding(io)
        calls += 1
        elapsed = time.perf_counter() - w0
        if elapsed >= min_time:
            return elapsed / calls, (time.process_time() - c0) / calls


def run_bench(binary, pattern, min_time):
    """Google Benchmark rows matching `pattern` -> {name: (real s, cpu s, counters)}."""
    out = subprocess.run([binary, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], check=True, capture_output=True, text=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        rows[b["run_name"]] = (b["real_time"] * scale, b["cpu_time"] * scale, b)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path to bench_sgemm")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions; the best is kept")
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--m", default="1,128")
    ap.add_argument("--shapes", default="all", help="'all' or K:N,K:N,...")
    args = ap.parse_args()
    shapes = SHAPES if args.shapes == "all" else [tuple(map(int, s.split(":"))) for s in args.shapes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    ms = [int(m) for m in args.m.split(",")]

    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}; best of {args.reps} interleaved repetitions, "
          f"{args.min_time} s each\n")

    # This machine's read bandwidth, at L3-resident and DRAM sizes.
    bw = {}
    for _ in range(args.reps):
        for name, (_, _, b) in run_bench(args.bench, "BM_read_bandwidth", args.min_time).items():
            bw[name] = max(bw.get(name, 0.0), b["GB/s"])  # the counter is already GB/s
    print("| buffer | threads | read GB/s |\n|---:|---:|---:|")
    for name, gbs in bw.items():
        parts = dict(p.split(":") for p in name.split("/")[1:3])
        print(f"| {parts['MiB']} MiB | {parts['threads']} | {gbs:.1f} |")
    print()

    # Wall time is what a user sees; with one thread, CPU time (bench_sgemm's
    # cpu_time is the benchmark thread's; ORT with intra_op_num_threads = 1
    # computes on the calling thread) also discounts time other processes
    # held the core, so it still compares the kernels on a busy machine.
    print("| M | K | N | threads | 1bit µs | ORT µs | 1bit GFLOP/s | ORT GFLOP/s | 1bit GB/s | ORT GB/s "
          "| 1bit / ORT | 1bit / ORT, CPU time |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in ms:
        for k, n in shapes:
            for t in threads:
                sess, io, keep = ort_session(k, n, m, t)
                name = f"BM_sgemm/K:{k}/N:{n}/M:{m}/threads:{t}/real_time"
                ours = theirs = ours_cpu = theirs_cpu = float("inf")
                for _ in range(args.reps):
                    real, cpu, _ = run_bench(args.bench, f"^BM_sgemm/K:{k}/N:{n}/M:{m}/threads:{t}/", args.min_time)[name]
                    ours, ours_cpu = min(ours, real), min(ours_cpu, cpu)
                    real, cpu = time_ort(sess, io, args.min_time)
                    theirs, theirs_cpu = min(theirs, real), min(theirs_cpu, cpu)
                del sess, io, keep
                flops, wbytes = 2.0 * m * n * k, 4.0 * k * n
                print(f"| {m} | {k} | {n} | {t} | {ours * 1e6:.0f} | {theirs * 1e6:.0f} | {flops / ours / 1e9:.1f} "
                      f"| {flops / theirs / 1e9:.1f} | {wbytes / ours / 1e9:.1f} | {wbytes / theirs / 1e9:.1f} "
                      f"| {theirs / ours:.2f} | {f'{theirs_cpu / ours_cpu:.2f}' if t == 1 else '-'} |", flush=True)


if __name__ == "__main__":
    main()
