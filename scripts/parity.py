#!/usr/bin/env python3
"""Greedy-decode parity: 1bit against onnxruntime on the same graph and
against transformers running the same greedy loop on the same weights.

1bit runs `ort-run --dump-logits` (its prompt ids, chosen ids and per-step
logits); onnxruntime then decodes the same prompt ids on the same ONNX file
(feeding `present` back as `past` for a cached graph), and transformers
decodes them on the checkpoint (or on the seeded random weights the export
used). Per step it reports KL(reference || 1bit) in nats, top-1 agreement
and the max abs logit difference; it fails when the mean KL exceeds --max-kl
or any step's top-1 differs.

  parity.py --onebit build/1bit --model DIR/model-cached.onnx --hf DIR \\
            --prompt "The capital of France is" -n 64 [--onebit-arg --cached]
  parity.py ... --config cfg.json --random-init --seed 0      # random-init export
  parity.py ... --compare other.npy                           # two 1bit dumps
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np

from onebit_tools import cli


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(ref: np.ndarray, ref_ids: np.ndarray, got: np.ndarray, got_ids: np.ndarray) -> dict:
    """Per-step statistics over the steps both runs made."""
    steps = min(len(ref), len(got))
    lp, lq = log_softmax(ref[:steps]), log_softmax(got[:steps])
    kl = (np.exp(lp) * (lp - lq)).sum(axis=-1)
    top1 = ref[:steps].argmax(-1) == got[:steps].argmax(-1)
    same_ids = int(np.sum(ref_ids[:steps] == got_ids[:steps]))
    return {
        "steps": steps,
        "steps_ref": len(ref),
        "steps_1bit": len(got),
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
        "top1": float(top1.mean()),
        "first_top1_miss": int(np.argmin(top1)) if not top1.all() else -1,
        "same_ids": same_ids,
        "max_abs_diff": float(np.abs(ref[:steps].astype(np.float64) - got[:steps]).max()),
    }


def run_onebit(onebit: str, model: str, prompt_args: list[str], n: int, extra: list[str], out: str):
    """1bit's greedy run: per-step logits, chosen ids, prompt ids."""
    d = cli.ort_run(onebit, model, prompt_args, n, out, extra)
    return d.logits, d.ids, d.prompt


def is_float16_graph(model: str) -> bool:
    import onnx

    graph_inputs = onnx.load(model, load_external_data=False).graph.input
    return any(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for i in graph_inputs)


def ort_session(model: str, **kw):
    """onnxruntime on `model`; a float16 graph with buffer reuse off (onebit_tools/ort.py)."""
    from onebit_tools.ort import session

    return session(model, mem_reuse=not is_float16_graph(model), **kw)


class OrtCache:
    """Feeds an onnxruntime session step by step as 1bit's generator does:
    the stacked `past` -> `present`, or per-layer caches (Optimum,
    onnxruntime-genai: past_key_values.N.key -> present.N.key), plus
    attention_mask and position_ids when the graph has them; an uncached
    graph re-runs the whole sequence."""

    def __init__(self, model: str, sess):
        self.names = {i.name: i for i in sess.get_inputs()}
        self.outputs = [o.name for o in sess.get_outputs()]
        self.stacked = "past" in self.names
        self.layers = sorted(k for k in self.names if k.startswith("past_key_values."))
        self.head = _head_size(model, self.names[self.layers[0]].shape) if self.layers else None
        self.reset()

    def reset(self):
        dtypes = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
        self.past = None
        if self.stacked:
            shp = self.names["past"].shape
            self.past = np.zeros((shp[0], 1, shp[2], 0, shp[4]), dtype=dtypes[self.names["past"].type])
        if self.layers:
            self.past = {k: np.zeros((1, self.names[k].shape[1], 0, self.head), dtype=dtypes[self.names[k].type])
                         for k in self.layers}

    def feed(self, ids: list[int], first: bool) -> dict:
        """The inputs for the step that follows `ids` (all of them at the first step or uncached)."""
        feed_ids = ids if not (self.stacked or self.layers) or first else ids[-1:]
        feed = {"input_ids": np.array([feed_ids], dtype=np.int64)}
        if self.stacked:
            feed["past"] = self.past
        if self.layers:
            feed.update(self.past)
        if "attention_mask" in self.names:
            feed["attention_mask"] = np.ones((1, len(ids)), dtype=np.int64)
        if "position_ids" in self.names:
            feed["position_ids"] = np.arange(len(ids) - len(feed_ids), len(ids), dtype=np.int64)[None]
        return feed

    def step(self, sess, ids: list[int], first: bool) -> dict:
        """Runs one step; keeps the new cache; returns the outputs by name."""
        outs = dict(zip(self.outputs, sess.run(None, self.feed(ids, first))))
        if self.stacked:
            self.past = outs["present"]
        if self.layers:
            self.past = {k: outs["present" + k[len("past_key_values"):]] for k in self.layers}
        return outs


def ort_greedy(model: str, prompt: np.ndarray, n: int, eos: set[int], follow: np.ndarray | None = None):
    """onnxruntime's greedy run: per-step logits and argmax ids. With `follow`
    (1bit's ids), each step feeds follow[step] instead of its own choice, so
    every step's logits are on 1bit's sequence (teacher forcing)."""
    sess = ort_session(model)
    cache = OrtCache(model, sess)
    ids = [int(t) for t in prompt]
    logits_out, chosen = [], []
    for step in range(n):
        outs = cache.step(sess, ids, step == 0)
        last = outs["logits"][0, -1].astype(np.float32)
        tok = int(np.argmax(last))
        logits_out.append(last.astype(np.float32))
        chosen.append(tok)
        if follow is not None:
            if step + 1 >= len(follow):
                break
            tok = int(follow[step])
        ids.append(tok)
        if tok in eos:
            break
    return np.stack(logits_out), np.array(chosen)


def _head_size(model: str, shape) -> int:
    """The cache's head size: declared, else genai_config.json's head_size."""
    if isinstance(shape[3], int):
        return shape[3]
    cfg = Path(model).parent / "genai_config.json"
    return int(json.loads(cfg.read_text())["model"]["decoder"]["head_size"])


def hf_model(args):
    import torch

    import export_onnx

    if args.hf:
        model = export_onnx.load_pretrained(args.hf, args.layers)
    else:
        model = export_onnx.load_random(args.config, args.layers, args.seed)
    return model, torch


def hf_greedy(args, prompt: np.ndarray, n: int, eos: set[int]):
    model, torch = hf_model(args)
    ids = torch.tensor([prompt.tolist()], dtype=torch.long)
    logits_out, chosen = [], []
    past = None
    with torch.no_grad():
        for step in range(n):
            feed = ids if past is None else ids[:, -1:]
            # transformers 5.x names the cache argument `cache`; older ones `past_key_values`.
            try:
                out = model(input_ids=feed, cache=past, use_cache=True)
            except TypeError:
                out = model(input_ids=feed, past_key_values=past, use_cache=True)
            past = getattr(out, "cache", None) or out.past_key_values
            last = out.logits[0, -1].float().numpy()
            tok = int(np.argmax(last))
            logits_out.append(last)
            chosen.append(tok)
            ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
            if tok in eos:
                break
    return np.stack(logits_out), np.array(chosen)


def eos_ids(model: str) -> set[int]:
    d = Path(model).parent
    ids: set[int] = set()
    for name in ("generation_config.json", "genai_config.json", "config.json"):
        p = d / name
        if p.exists():
            j = json.loads(p.read_text())
            v = j.get("model", {}).get("eos_token_id") if name == "genai_config.json" else j.get("eos_token_id")
            if v is not None:
                ids.update(v if isinstance(v, list) else [v])
            if ids:
                break
    return ids


def top1_misses(got: np.ndarray, ref: np.ndarray, steps: int) -> list[tuple[int, float]]:
    """(step, 1bit's margin between its top-1 and the reference's) for each
    step where the two top-1 differ: a test allows a miss only at a near tie."""
    misses = []
    for step in range(steps):
        a, b = int(got[step].argmax()), int(ref[step].argmax())
        if a != b:
            misses.append((step, float(got[step][a] - got[step][b])))
    return misses


def greedy_against(onebit: str, model: str, prompt_ids: list[int], steps: int, reference: str, config: str | None,
                   dump: str, hf: str | None = None, extra: list[str] = ()) -> dict:
    """1bit's greedy run of `model` (a random-init export of `config`, seed 0,
    or an export of the checkpoint folder `hf`) against onnxruntime's on the
    same graph or transformers' on the same weights: compare()'s statistics,
    printed. `extra`: 1bit's further arguments (--cached)."""
    from types import SimpleNamespace

    got, got_ids, prompt = run_onebit(onebit, model, ["--prompt-ids", ",".join(map(str, prompt_ids))], steps,
                                      list(extra), dump)
    eos = eos_ids(model)
    if reference == "onnxruntime":
        ref, ref_ids = ort_greedy(model, prompt, steps, eos)
    else:
        args = SimpleNamespace(hf=hf, config=None if hf else config, layers=None, seed=0)
        ref, ref_ids = hf_greedy(args, np.asarray(prompt), steps, eos)
    s = compare(ref, ref_ids, got, got_ids)
    print(report(f"{Path(model).stem}_vs_{reference}", s))
    return s


def report(name: str, s: dict) -> str:
    return (f"{name:<28} steps {s['steps']:>3} (ref {s['steps_ref']}, 1bit {s['steps_1bit']})  mean KL {s['mean_kl']:.3e}  "
            f"max KL {s['max_kl']:.3e}  top-1 {s['top1'] * 100:.1f}%  same ids {s['same_ids']}/{s['steps']}  "
            f"max|d| {s['max_abs_diff']:.3e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onebit", required=True, help="the 1bit binary")
    ap.add_argument("--model", required=True, help="the ONNX graph 1bit and onnxruntime run")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--prompt")
    g.add_argument("--prompt-ids", help="comma-separated token ids")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--onebit-arg", action="append", default=[], help="extra argument for 1bit ort-run (repeat)")
    ap.add_argument("--hf", help="transformers checkpoint directory of the same weights")
    ap.add_argument("--config", help="config.json of a --random-init export")
    ap.add_argument("--random-init", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime")
    ap.add_argument("--compare", help="another 1bit dump (.npy with .ids.npy beside) to compare against instead")
    ap.add_argument("--max-kl", type=float, default=1e-6, help="fail above this mean KL (nats)")
    ap.add_argument("--require-top1", type=float, default=1.0, help="fail below this top-1 agreement")
    ap.add_argument("--json", help="write the statistics here")
    ap.add_argument("--teacher-force", action="store_true",
                    help="onnxruntime follows 1bit's tokens, so every step compares logits on the same sequence")
    args = ap.parse_args()

    prompt_args = ["--prompt", args.prompt] if args.prompt else ["--prompt-ids", args.prompt_ids or ""]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        got, got_ids, prompt = run_onebit(args.onebit, args.model, prompt_args, args.n, args.onebit_arg,
                                          os.path.join(tmp, "onebit.npy"))
        print(f"prompt {len(prompt)} tokens; 1bit made {len(got_ids)} steps: {got_ids.tolist()}")
        eos = eos_ids(args.model)
        if args.compare:
            ref, ref_ids = np.load(args.compare), np.load(args.compare[:-4] + ".ids.npy")
            results["vs_dump"] = compare(ref, ref_ids, got, got_ids)
        if not args.compare and not args.no_ort:
            ref, ref_ids = ort_greedy(args.model, prompt, args.n, eos, got_ids if args.teacher_force else None)
            results["vs_onnxruntime"] = compare(ref, ref_ids, got, got_ids)
        if args.hf or args.config:
            ref, ref_ids = hf_greedy(args, prompt, args.n, eos)
            results["vs_transformers"] = compare(ref, ref_ids, got, got_ids)
            print(f"transformers chose: {ref_ids.tolist()}")
    ok = True
    for name, s in results.items():
        print(report(name, s))
        ok &= s["mean_kl"] <= args.max_kl and s["top1"] >= args.require_top1 and s["steps_ref"] == s["steps_1bit"]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print("parity", "passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
