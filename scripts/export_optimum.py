#!/usr/bin/env python3
"""Export a checkpoint with Optimum 1.x itself, as most published ONNX
language models were made (onnx-community and transformers.js folders):

  optimum-cli export onnx --model CHECKPOINT --task text-generation-with-past OUT

with optimum 1.23.3 and transformers 4.46.3 (requirements-optimum.txt),
which Optimum needs: they are installed into a directory of their own
(--site, default build/optimum-site) and put ahead of .venv's packages in a
child process, so .venv keeps transformers 5. The graph is what those
versions write: ai.onnx opset 14 (Optimum's default for Llama-family
models), torch.onnx's TorchScript exporter, transformers 4.x's mask
(Trilu, ScatterND) and sdpa (its scale read off the query's shape).

Two things differ from a user's run, and neither changes the graph's form:
torch.onnx.export is called with dynamo=False, the only exporter torch had
when those versions were current (today's torch defaults to dynamo); and a
transformers 5 checkpoint's config is written back in 4.x's spelling
(rope_parameters -> rope_theta, dtype -> torch_dtype), which transformers
4.46 would otherwise read as the defaults (rope_theta 10000).

  scripts/run_python.sh scripts/export_optimum.py build-models/smollm2-135m -o build-models/smollm2-135m-optimum
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
REQUIREMENTS = HERE.parent / "requirements-optimum.txt"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")


def pins() -> list[str]:
    return [l.strip() for l in REQUIREMENTS.read_text().splitlines() if l.strip() and not l.startswith("#")]


def ensure_site(site: Path) -> None:
    """The pinned packages in `site`; reinstalled when the pins changed."""
    stamp = site / "requirements-optimum.txt"
    if stamp.exists() and stamp.read_text() == REQUIREMENTS.read_text():
        return
    if site.exists():
        shutil.rmtree(site)
    print(f"[optimum] installing {' '.join(pins())} into {site}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--target", str(site), *pins()], check=True)
    shutil.copy(REQUIREMENTS, stamp)


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


def child(checkpoint: str, out: str, opset: int | None) -> None:
    """Runs with the pinned packages first on sys.path."""
    import torch

    export = torch.onnx.export

    def legacy_export(*args, **kwargs):
        kwargs.setdefault("dynamo", False)
        return export(*args, **kwargs)

    torch.onnx.export = legacy_export
    import optimum
    import transformers
    from optimum.exporters.onnx import main_export

    print(f"[optimum] optimum {importlib.metadata.version('optimum')}, "
          f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    main_export(checkpoint, output=out, task="text-generation-with-past", opset=opset, device="cpu")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="a transformers checkpoint folder (config.json, weights, tokenizer)")
    ap.add_argument("-o", "--out", required=True, help="the folder to write (model.onnx, configs, tokenizer)")
    ap.add_argument("--opset", type=int, help="ai.onnx opset (default: Optimum's for the architecture)")
    ap.add_argument("--site", default=str(HERE.parent / "build" / "optimum-site"),
                    help="where the pinned Optimum stack is installed (default build/optimum-site)")
    ap.add_argument("--force", action="store_true", help="export even when OUT/model.onnx is newer than its sources")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.checkpoint, args.out, args.opset)
        return 0
    src, out, site = Path(args.checkpoint), Path(args.out), Path(args.site)
    if not (src / "config.json").exists():
        sys.exit(f"export_optimum: {src} has no config.json (a transformers checkpoint folder is needed)")
    model = out / "model.onnx"
    sources = [Path(__file__).resolve(), REQUIREMENTS, *(f for f in src.iterdir() if f.is_file())]
    if model.exists() and all(f.stat().st_mtime <= model.stat().st_mtime for f in sources) and not args.force:
        print(f"[optimum] {model} is up to date (--force exports again)")
        return 0
    ensure_site(site)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "checkpoint"
        config_for_4x(src, ckpt)
        env = dict(os.environ, PYTHONPATH=str(site))
        cmd = [sys.executable, str(Path(__file__).resolve()), str(ckpt), "-o", str(out), "--child"]
        if args.opset:
            cmd += ["--opset", str(args.opset)]
        subprocess.run(cmd, env=env, check=True)
    # Optimum's tokenizer copy needs tokenizers 0.20 to read the file; the
    # checkpoint's own files are the ones a user's folder holds.
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    print(f"[optimum] wrote {out / 'model.onnx'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
