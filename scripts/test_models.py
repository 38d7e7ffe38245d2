#!/usr/bin/env python3
"""Small models the tests share, exported once into the build directory.

  test_models.py tiny --out DIR   # tiny random Qwen3: DIR/model.onnx, DIR/model-cached.onnx,
                                  # DIR/model-cached-op23.onnx, DIR/model-cached-op23-sdpa.onnx,
                                  # DIR/model-cached-f16.onnx (float16 weights, activations, cache),
                                  # DIR/model-cached-bf16.onnx (the same in bfloat16),
                                  # DIR/model-cached-ts.onnx (TorchScript exporter, Optimum's layout)

An export is redone only when its file is missing or older than the export
script or the config, so a second ctest run reuses it.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TINY_CONFIG = HERE / "configs" / "qwen3-tiny.json"
# The real Qwen3 tokenizer and its config files, so ort-run works on the tiny model.
QWEN3 = HERE.parent.parent / "shared" / "models" / "qwen3"


def stale(target: Path, *sources: Path) -> bool:
    if not target.exists():
        return True
    t = target.stat().st_mtime
    return any(s.stat().st_mtime > t for s in sources)


def export(out: Path, cached: bool, opset: int | None = None, attention: str = "eager", half: str = ""):
    name = "model-cached" if cached else "model"
    if opset:
        name += f"-op{opset}" + ("-sdpa" if attention == "sdpa" else "")
    if half:
        name += {"float16": "-f16", "bfloat16": "-bf16"}[half]
    target = out / f"{name}.onnx"
    if not stale(target, HERE / "export_onnx.py", TINY_CONFIG):
        print(f"up to date: {target}")
        return
    cmd = [sys.executable, str(HERE / "export_onnx.py"), "--config", str(TINY_CONFIG), "--random-init", "--seed", "0",
           "-o", str(target)]
    if cached:
        cmd.append("--cached")
    if opset:
        cmd += ["--opset", str(opset), "--attention", attention]
    if half:
        cmd += ["--dtype", half]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def tiny(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    export(out, cached=False)
    export(out, cached=True)
    # Opset 23: torch.onnx writes RMSNormalization and RotaryEmbedding, and
    # with sdpa attention the Attention op.
    export(out, cached=True, opset=23)
    export(out, cached=True, opset=23, attention="sdpa")
    # A float16 export: float16 weights, activations, mask and cache; and
    # the same in bfloat16, as a bfloat16 checkpoint exports unconverted.
    export(out, cached=True, half="float16")
    export(out, cached=True, half="bfloat16")
    # torch.onnx's TorchScript exporter in Optimum's layout (per-layer cache,
    # attention_mask, position_ids), as most published ONNX LLMs are made.
    target = out / "model-cached-ts.onnx"
    if stale(target, HERE / "export_torchscript.py", TINY_CONFIG):
        cmd = [sys.executable, str(HERE / "export_torchscript.py"), "--config", str(TINY_CONFIG), "--random-init",
               "--seed", "0", "-o", str(target)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    else:
        print(f"up to date: {target}")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src, dst = QWEN3 / name, out / name
        if src.exists() and stale(dst, src):
            dst.write_bytes(src.read_bytes())
    # The config beside the graph gives ort-run the context length and EOS ids.
    dst = out / "config.json"
    if stale(dst, TINY_CONFIG):
        dst.write_bytes(TINY_CONFIG.read_bytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", choices=["tiny"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tiny(Path(args.out))


if __name__ == "__main__":
    main()
