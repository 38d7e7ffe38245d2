#!/usr/bin/env python3
"""onnxruntime under the protocol of `1bit bench`, so the two can be put side
by side: the same graph, the same synthetic prompt ids, a fixed number of new
tokens with EOS ignored, greedy; prefill is the first step, decode every
later one; a cached graph feeds `present` back as `past`, an uncached one
re-runs the whole sequence. Per-layer caches (past_key_values.N.key/value ->
present.N.key/value, as onnxruntime-genai and Optimum write them) are fed
back the same way, with attention_mask and position_ids when the graph has
them; a float16 graph runs with onnxruntime's buffer reuse off
(onebit_tools/ort.py). CPU execution provider, all graph optimizations
(ORT_ENABLE_ALL), intra-op threads = --threads. Prints one JSON object.

  bench_ort.py MODEL --prompt-lengths 16,64 --gen 128 --threads 2 [--opt all|basic|disable] [--session-config k=v]
"""
import argparse
import json
import resource
import sys
import time

import numpy as np



def synthetic_prompt(n: int, vocab: int) -> list[int]:
    """The same ids as models/bench.cpp's synthetic_prompt (xorshift64)."""
    x = 0x9E3779B97F4A7C15
    rng = max(1, min(vocab, 30000) - 100)
    ids = []
    mask = (1 << 64) - 1
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        ids.append(100 + x % rng)
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompt-lengths", default="16,64,256,1024")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--opt", choices=["all", "extended", "basic", "disable"], default="all")
    ap.add_argument("--session-config", action="append", default=[], help="session config entry key=value")
    args = ap.parse_args()

    import parity

    config = dict(kv.partition("=")[::2] for kv in args.session_config)
    t0 = time.perf_counter()
    sess = parity.ort_session(args.model, opt=args.opt, threads=args.threads or None,
                              inter_threads=1 if args.threads else None, config=config)
    load_s = time.perf_counter() - t0
    cache = parity.OrtCache(args.model, sess)
    vocab = next(o.shape[-1] for o in sess.get_outputs() if o.name == "logits")
    rows = []
    for p in [int(s) for s in args.prompt_lengths.split(",")]:
        ids = synthetic_prompt(p, vocab if isinstance(vocab, int) else 32000)
        cache.reset()
        prefill_ms, decode_ms = 0.0, 0.0
        for step in range(args.gen):
            t = time.perf_counter()
            out = cache.step(sess, ids, step == 0)
            tok = int(np.argmax(out["logits"][0, -1]))
            ms = (time.perf_counter() - t) * 1000
            if step == 0:
                prefill_ms = ms
            else:
                decode_ms += ms
            ids.append(tok)
        rows.append({"prompt": p, "gen": args.gen, "prefill_ms": prefill_ms,
                     "decode_ms_per_token": decode_ms / max(1, args.gen - 1)})
        print(f"ort prompt {p}: prefill {p / (prefill_ms / 1000):.1f} tok/s, decode "
              f"{decode_ms / max(1, args.gen - 1):.2f} ms/token", file=sys.stderr, flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"model": args.model, "threads": args.threads, "opt": args.opt, "load_s": load_s,
                      "rows": rows, "peak_rss_mib": peak}))


if __name__ == "__main__":
    main()
