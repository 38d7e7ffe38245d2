#!/usr/bin/env python3
"""Export a checkpoint with Optimum 1.x itself, as most published ONNX
language models were made (onnx-community and transformers.js folders):

  optimum-cli export onnx --model CHECKPOINT --task text-generation-with-past OUT

with one of two pinned stacks, which Optimum needs (--stack):

  1.23  optimum 1.23.3, transformers 4.46.3 (requirements-optimum.txt): the
        stack of most onnx-community and transformers.js Llama-family,
        Qwen2, Phi and Gemma folders; transformers 4.x's mask (Trilu,
        ScatterND).
  1.27  optimum 1.27.0, transformers 4.53.3 (requirements-optimum-1.27.txt):
        the last Optimum 1.x, the one that exports Qwen3, Granite and SmolLM3
        (onnx-community's Qwen3 folders); transformers 4.53's mask
        (masking_utils, without vmap as Optimum patches it) and Phi-3's
        rotary on a slice as long as cos.

Each is installed into a directory of its own (--site, default
build/optimum-site or build/optimum-site-1.27) and put ahead of .venv's
packages in a child process, so .venv keeps transformers 5. The graph is
what those versions write: ai.onnx opset 14 (Optimum's default for
Llama-family models), torch.onnx's TorchScript exporter and sdpa as
transformers 4.x calls it (its scale read off the query's shape).

Four things differ from a user's run, and none changes the graph's form:
torch.onnx.export is called with dynamo=False, the only exporter torch had
when those versions were current (today's torch defaults to dynamo); the
private torch.onnx.symbolic_opset14 helpers Optimum 1.27 imports
(_attention_scale, _causal_attention_mask, ...) are handed to it from the
module today's torch keeps them in, the same functions; the dummy cache
Optimum traces with takes the head size the config states (head_dim) where
it is not hidden_size / heads (Qwen3-0.6B: 128, not 64), or the trace fails;
and a transformers 5
checkpoint's config is written back in 4.x's spelling (rope_parameters ->
rope_theta, dtype -> torch_dtype), which transformers 4.x would otherwise
read as the defaults (rope_theta 10000).

  scripts/run_python.sh scripts/export_optimum.py build-models/smollm2-135m -o build-models/smollm2-135m-optimum
  scripts/run_python.sh scripts/export_optimum.py CHECKPOINT -o OUT --stack 1.27
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STACKS = {"1.23": HERE.parent / "requirements-optimum.txt", "1.27": HERE.parent / "requirements-optimum-1.27.txt"}
SITES = {"1.23": "optimum-site", "1.27": "optimum-site-1.27"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")


def pins(requirements: Path) -> list[str]:
    return [l.strip() for l in requirements.read_text().splitlines() if l.strip() and not l.startswith("#")]


def ensure_site(site: Path, requirements: Path) -> None:
    """The pinned packages in `site`; reinstalled when the pins changed."""
    stamp = site / "requirements-optimum.txt"
    if stamp.exists() and stamp.read_text() == requirements.read_text():
        return
    if site.exists():
        shutil.rmtree(site)
    print(f"[optimum] installing {' '.join(pins(requirements))} into {site}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--target", str(site), *pins(requirements)], check=True)
    shutil.copy(requirements, stamp)


def config_for_4x(src: Path, dst: Path) -> None:
    """The checkpoint in `dst` (files linked), its config in transformers 4.x's spelling."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json":
            os.symlink(f.resolve(), dst / f.name)
    config = json.loads((src / "config.json").read_text())
    rope = config.pop("rope_parameters", None)
    if rope:
        rope = dict(rope)
        config.setdefault("rope_theta", rope.pop("rope_theta", 10000.0))
        # 4.x keeps these beside rope_scaling, not in it
        for key in ("partial_rotary_factor", "original_max_position_embeddings"):
            if key in rope:
                config.setdefault(key, rope.pop(key))
        kind = rope.pop("rope_type", rope.get("type", "default"))
        if kind != "default":
            rope["type"] = kind
            config["rope_scaling"] = rope
    if "dtype" in config:
        config.setdefault("torch_dtype", config.pop("dtype"))
    (dst / "config.json").write_text(json.dumps(config, indent=2))


def child(checkpoint: str, out: str, opset: int | None, post_process: bool) -> None:
    """Runs with the pinned packages first on sys.path."""
    import torch

    export = torch.onnx.export

    def legacy_export(*args, **kwargs):
        kwargs.setdefault("dynamo", False)
        return export(*args, **kwargs)

    torch.onnx.export = legacy_export
    # Optimum 1.27 imports private helpers from torch.onnx.symbolic_opset14,
    # which today's torch keeps in its TorchScript exporter's module (the
    # public one re-exports only public names): the same functions, handed on.
    import torch.onnx.symbolic_opset14 as public
    try:
        from torch.onnx._internal.torchscript_exporter import symbolic_opset14 as internal
    except ImportError:
        internal = None
    for name in ("_attention_scale", "_causal_attention_mask", "_onnx_symbolic", "_type_utils", "jit_utils",
                 "symbolic_helper"):
        if internal is not None and not hasattr(public, name) and hasattr(internal, name):
            setattr(public, name, getattr(internal, name))
    import optimum
    import transformers
    from optimum.exporters.onnx import main_export
    from optimum.utils import input_generators

    # Optimum 1.x sizes its dummy cache's heads hidden_size / heads, which
    # is not Qwen3-0.6B's (1024 / 16 = 64, its heads are 128): the trace
    # then fails. The head size the checkpoint states, where it states one.
    pkv = input_generators.MistralDummyPastKeyValuesGenerator
    plain_init = pkv.__init__

    def init_with_head_dim(self, task, normalized_config, *args, **kwargs):
        plain_init(self, task, normalized_config, *args, **kwargs)
        head_dim = getattr(getattr(normalized_config, "config", None), "head_dim", None)
        if head_dim and self.hidden_size // self.num_attention_heads != head_dim:
            self.hidden_size = head_dim * self.num_attention_heads

    pkv.__init__ = init_with_head_dim

    print(f"[optimum] optimum {importlib.metadata.version('optimum')}, "
          f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    main_export(checkpoint, output=out, task="text-generation-with-past", opset=opset, device="cpu",
                no_post_process=not post_process)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="a transformers checkpoint folder (config.json, weights, tokenizer)")
    ap.add_argument("-o", "--out", required=True, help="the folder to write (model.onnx, configs, tokenizer)")
    ap.add_argument("--opset", type=int, help="ai.onnx opset (default: Optimum's for the architecture)")
    ap.add_argument("--stack", choices=sorted(STACKS), default="1.23",
                    help="the pinned Optimum and transformers versions (default 1.23; see above)")
    ap.add_argument("--site", help="where the stack is installed (default build/optimum-site, "
                                   "build/optimum-site-1.27 for --stack 1.27)")
    ap.add_argument("--force", action="store_true", help="export even when OUT/model.onnx is newer than its sources")
    ap.add_argument("--no-post-process", action="store_true",
                    help="keep the graph as traced: Optimum's post-processing (the tied embedding stored once) "
                         "serializes the whole model in one protobuf, which fails past 2 GB (Qwen3-0.6B in float32)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.checkpoint, args.out, args.opset, not args.no_post_process)
        return 0
    requirements = STACKS[args.stack]
    src, out = Path(args.checkpoint), Path(args.out)
    site = Path(args.site) if args.site else HERE.parent / "build" / SITES[args.stack]
    if not (src / "config.json").exists():
        sys.exit(f"export_optimum: {src} has no config.json (a transformers checkpoint folder is needed)")
    model = out / "model.onnx"
    # Which stack wrote OUT: another stack's export is not up to date.
    stamp = out / ".optimum-stack"
    sources = [Path(__file__).resolve(), requirements, *(f for f in src.iterdir() if f.is_file())]
    if (model.exists() and stamp.exists() and stamp.read_text() == requirements.read_text() and not args.force
            and all(f.stat().st_mtime <= model.stat().st_mtime for f in sources)):
        print(f"[optimum] {model} is up to date (--force exports again)")
        return 0
    ensure_site(site, requirements)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "checkpoint"
        config_for_4x(src, ckpt)
        env = dict(os.environ, PYTHONPATH=str(site))
        cmd = [sys.executable, str(Path(__file__).resolve()), str(ckpt), "-o", str(out), "--child"]
        if args.opset:
            cmd += ["--opset", str(args.opset)]
        if args.no_post_process:
            cmd.append("--no-post-process")
        subprocess.run(cmd, env=env, check=True)
    # Optimum's tokenizer copy needs tokenizers 0.20 to read the file; the
    # checkpoint's own files are the ones a user's folder holds.
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    shutil.copy(requirements, stamp)
    print(f"[optimum] wrote {out / 'model.onnx'} (stack {args.stack})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
