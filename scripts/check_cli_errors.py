#!/usr/bin/env python3
"""Bad input to `1bit ort-run`, `1bit run` and `1bit inspect`: each case must
exit non-zero (1, not a crash) with one clear message naming what is wrong.

  check_cli_errors.py --onebit build/1bit --tiny DIR   # DIR: the tiny export (model.onnx, tokenizer.json)
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper


def case(onebit, name, args, expect, env=None):
    p = subprocess.run([onebit] + args, capture_output=True, text=True, env=env, timeout=300)
    msg = (p.stderr or "").strip()
    ok = p.returncode == 1 and all(e in msg for e in expect) and "internal error" not in msg
    print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {p.returncode}: {msg.splitlines()[-1] if msg else '(no message)'}")
    if not ok:
        print(f"     expected exit 1 and {expect} in:\n{msg}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--tiny", required=True)
    args = ap.parse_args()
    tiny = os.path.join(args.tiny, "model.onnx")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        # A model directory without a tokenizer.
        bare = os.path.join(tmp, "bare")
        os.makedirs(bare)
        shutil.copy(tiny, bare)
        ok &= case(args.onebit, "missing tokenizer", ["ort-run", os.path.join(bare, "model.onnx"), "--prompt", "hi"],
                   ["no tokenizer.json", "--tokenizer"])
        ok &= case(args.onebit, "unreadable tokenizer",
                   ["ort-run", tiny, "--prompt", "hi", "--tokenizer", os.path.join(tmp, "nope.json")], ["nope.json"])
        bad_tok = os.path.join(tmp, "bad_tokenizer.json")
        with open(bad_tok, "w") as f:
            f.write('{"model": {"type": "BPE", "vocab": 3}}')
        ok &= case(args.onebit, "malformed tokenizer", ["ort-run", tiny, "--prompt", "hi", "--tokenizer", bad_tok],
                   ["bad_tokenizer.json"])
        # A context of 8 positions (config.json beside a copy of the model).
        short = os.path.join(tmp, "short")
        os.makedirs(short)
        shutil.copy(tiny, short)
        with open(os.path.join(short, "config.json"), "w") as f:
            f.write('{"max_position_embeddings": 8, "eos_token_id": 151645}')
        ok &= case(args.onebit, "prompt longer than the context",
                   ["ort-run", os.path.join(short, "model.onnx"), "--prompt-ids", "1,2,3,4,5,6,7,8,9,10"],
                   ["prompt is 10 tokens", "context is 8"])
        ok &= case(args.onebit, "-n 0", ["ort-run", tiny, "--prompt", "hi", "-n", "0"], ["at least 1"])
        ok &= case(args.onebit, "--cached on a graph without a cache", ["ort-run", tiny, "--cached", "--prompt", "hi"],
                   ["no KV cache input"])
        # A graph without logits.
        g = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["out"])], "nologits",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("out", TensorProto.INT64, ["b", "s"])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        nologits = os.path.join(tmp, "nologits.onnx")
        onnx.save(m, nologits)
        ok &= case(args.onebit, "graph without logits", ["ort-run", nologits, "--prompt-ids", "1,2"],
                   ["no output named logits", "inputs:", "input_ids"])
        ok &= case(args.onebit, "missing model", ["ort-run", os.path.join(tmp, "none.onnx"), "--prompt-ids", "1"],
                   ["none.onnx", "cannot open"])
        # 1bit run: a bad .npy and a wrong input name.
        junk = os.path.join(tmp, "junk.npy")
        with open(junk, "wb") as f:
            f.write(b"not numpy")
        ok &= case(args.onebit, "run: bad .npy", ["run", tiny, "--input", f"input_ids={junk}"], ["junk.npy", "not a .npy"])
        ids = os.path.join(tmp, "ids.npy")
        np.save(ids, np.array([[1, 2, 3]], dtype=np.int64))
        ok &= case(args.onebit, "run: unknown input", ["run", tiny, "--input", f"tokens={ids}"],
                   ["no input 'tokens'", "input_ids"])
        f32 = os.path.join(tmp, "f32.npy")
        np.save(f32, np.zeros((1, 3), dtype=np.float32))
        ok &= case(args.onebit, "run: wrong dtype", ["run", tiny, "--input", f"input_ids={f32}"],
                   ["'input_ids' is float32", "int64"])
        ok &= case(args.onebit, "inspect: not a model", ["inspect", junk], ["junk.npy"])
    print("cli errors:", "passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
