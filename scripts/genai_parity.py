#!/usr/bin/env python3
"""1bit on an onnxruntime-genai model folder against onnxruntime-genai's own
greedy generator (tokens) and onnxruntime on the same graph (per-step
logits, teacher-forced on 1bit's tokens), over several prompts: the numbers
docs/parity.md records for the genai builds.

  genai_parity.py --onebit build/1bit --model build-models/genai-int4 -n 32 \\
      --prompt "The capital of France is" --prompt "..." [--onebit-arg=--act-precision --onebit-arg=float]

--tokens-from onnxruntime takes the reference tokens from onnxruntime's own
greedy run on the graph instead (onnxruntime-genai 0.18's generator cannot
run its fp16 CPU builds: onebit_tools/ort.py).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

import parity


def genai_tokens(model_dir: str, ids: list[int], n: int) -> list[int]:
    import onnxruntime_genai as og

    model = og.Model(model_dir)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + n)
    g = og.Generator(model, params)
    g.append_tokens(ids)
    out = []
    while not g.is_done():
        g.generate_next_token()
        out.append(int(g.get_next_tokens()[0]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True)
    ap.add_argument("--model", required=True, help="onnxruntime-genai model folder")
    ap.add_argument("--prompt", action="append", required=True)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--onebit-arg", action="append", default=[])
    ap.add_argument("--tokens-from", choices=["genai", "onnxruntime"], default="genai",
                    help="whose greedy tokens 1bit's are compared with")
    ap.add_argument("--json")
    args = ap.parse_args()
    onnx_file = str(Path(args.model) / json.loads((Path(args.model) / "genai_config.json").read_text())["model"]["decoder"]["filename"])
    eos = parity.eos_ids(onnx_file)
    rows, kls, top1, agree, total = [], [], [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(args.prompt):
            got, ids, prompt = parity.run_onebit(args.onebit, onnx_file, ["--prompt", p], args.n, args.onebit_arg,
                                                 f"{tmp}/o{i}.npy")
            ours = [int(t) for t in ids]
            if args.tokens_from == "genai":
                theirs = genai_tokens(args.model, [int(t) for t in prompt], args.n)
            else:
                theirs = [int(t) for t in parity.ort_greedy(onnx_file, prompt, args.n, eos)[1]]
            part = next((j for j, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
            margin = None if part is None else float(got[part][ours[part]] - got[part][theirs[part]])
            ref, ref_ids = parity.ort_greedy(onnx_file, prompt, args.n, eos, follow=ids)
            s = parity.compare(ref, ref_ids, got, ids)
            same = len(ours) if part is None else part
            agree += same
            total += len(ours)
            kls.append(s["mean_kl"])
            top1.append(s["top1"])
            rows.append({"prompt": p, "steps": len(ours), "tokens_equal_genai": same, "parted_at": part,
                         "margin_at_part": margin, "ort": s})
            print(f"prompt {i}: {len(ours)} steps, {args.tokens_from}'s greedy run agrees on the first {same}"
                  + (f" (parts at step {part}: 1bit's logit margin {margin:.4f})" if part is not None else " (all)"))
            print("  " + parity.report("vs_onnxruntime (forced)", s))
    print(f"overall: tokens equal to {args.tokens_from}'s {agree}/{total}; mean KL vs onnxruntime {np.mean(kls):.3e}, "
          f"max per-prompt {max(kls):.3e}; top-1 {100 * np.mean(top1):.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
