#!/usr/bin/env python3
"""The session-kept KV cache (graph/kv_state.cpp) against the exported one:
`1bit ort-run` on a cached export, by default (the cache stays in the
session, appended in place) and with ONEBIT_KV_STATE=0 (the exported
Concats, `present` fed back as `past`), must choose the same tokens with
bit-identical logits; the default run must really use the state
(KvAppend nodes in its profile, no cache Concat left).

  check_kv_state.py --onebit build/1bit --model DIR/model-cached.onnx --layers 2
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np


def run(onebit, model, out, env_extra):
    env = dict(os.environ, ONEBIT_PROFILE="1", **env_extra)
    cmd = [onebit, "ort-run", model, "--prompt", "The quick brown fox jumps over the lazy dog", "-n", "40",
           "--dump-logits", out, "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    base = out[:-4]
    return np.load(out), np.load(base + ".ids.npy"), p.stderr


def profile_nodes(profile, op):
    m = re.search(rf"^\s+{re.escape(op)}\s+[\d.]+ ms\s+[\d.]+%\s+(\d+) nodes", profile, re.M)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--layers", type=int, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state, state_ids, profile = run(args.onebit, args.model, os.path.join(tmp, "state.npy"), {})
        plain, plain_ids, plain_profile = run(args.onebit, args.model, os.path.join(tmp, "plain.npy"),
                                              {"ONEBIT_KV_STATE": "0"})
    appends = profile_nodes(profile, "com.onebit::KvAppend")
    print(f"KvAppend nodes: {appends} (want {2 * args.layers}); cache Concats left: "
          f"{profile_nodes(profile, 'Concat')} (exported: {profile_nodes(plain_profile, 'Concat')})")
    ok = appends == 2 * args.layers and profile_nodes(plain_profile, "com.onebit::KvAppend") == 0
    same_ids = np.array_equal(state_ids, plain_ids)
    same_logits = state.shape == plain.shape and np.array_equal(state, plain)
    print(f"steps {len(state_ids)}: same tokens {same_ids}, bit-identical logits {same_logits}"
          + ("" if same_logits or state.shape != plain.shape else f" (max |d| {np.max(np.abs(state - plain)):.3g})"))
    ok = ok and same_ids and same_logits and len(state_ids) == 40
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
