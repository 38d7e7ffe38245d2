#!/usr/bin/env python3
"""Export a transformers causal LM as Optimum's ONNX exports are made: with
torch.onnx's TorchScript exporter (dynamo=False), the cache as one input
and output per layer and kind.

  input_ids       [batch, sequence] int64
  attention_mask  [batch, past_sequence + sequence] int64
  position_ids    [batch, sequence] int64
  past_key_values.N.key / .value  [batch, kv_heads, past_sequence, head_dim] float32
  -> logits       [batch, sequence, vocab] float32
  -> present.N.key / .value       [batch, kv_heads, past_sequence + sequence, head_dim]

That exporter declares no dtype or shape between the graph's inputs and
outputs and writes the norms, the rotary embedding and sdpa attention its
own way, so 1bit's tests and benchmarks use this to check that such files
run (and which of 1bit's fusions reach them). Optimum itself (optimum-onnx
0.1.0) does not work with transformers 5.x; this is its layout, not its code.

  python scripts/export_torchscript.py --config scripts/configs/qwen3-tiny.json \\
      --random-init -o build/models/qwen3-tiny-ts/model.onnx
  python scripts/export_torchscript.py --model build-models/smollm2-135m \\
      -o build-models/smollm2-135m-ts/model.onnx
"""
from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

import export_onnx


class OptimumLayout(torch.nn.Module):
    """forward(input_ids, attention_mask, position_ids, *past) -> logits, *present."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm
        self.layers = lm.config.num_hidden_layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)], config=self.lm.config)
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      past_key_values=cache, use_cache=True)
        present = []
        for layer in out.past_key_values.layers[: self.layers]:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def load(args) -> torch.nn.Module:
    if args.model:
        config = AutoConfig.from_pretrained(args.model)
        export_onnx.check_supported(config)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                     attn_implementation=args.attention)
    else:
        config = AutoConfig.from_pretrained(args.config)
        export_onnx.check_supported(config)
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=args.attention)
        export_onnx.randomize_norms(model, torch.Generator().manual_seed(args.seed + 1))
    return model.eval()


def export(model: torch.nn.Module, out: Path, opset: int) -> None:
    shape = export_onnx.ModelShape.of(model)
    past_len, seq = 3, 5
    ids = torch.randint(0, shape.vocab, (1, seq))
    mask = torch.ones(1, past_len + seq, dtype=torch.int64)
    positions = torch.arange(past_len, past_len + seq)[None]
    past = [torch.randn(1, shape.kv_heads, past_len, shape.head_dim) for _ in range(2 * shape.layers)]
    kinds = [(i, kind) for i in range(shape.layers) for kind in ("key", "value")]
    inputs = ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{i}.{k}" for i, k in kinds]
    outputs = ["logits"] + [f"present.{i}.{k}" for i, k in kinds]
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"},
            "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
    axes.update({name: {0: "batch", 2: "past_sequence"} for name in inputs[3:]})
    axes.update({name: {0: "batch", 2: "total_sequence"} for name in outputs[1:]})
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(OptimumLayout(model), (ids, mask, positions, *past), str(out), dynamo=False,
                          opset_version=opset, input_names=inputs, output_names=outputs, dynamic_axes=axes)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local transformers checkpoint directory")
    src.add_argument("--config", help="config.json; use with --random-init")
    p.add_argument("--random-init", action="store_true", help="random weights of the config's shapes")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-init (default 0)")
    p.add_argument("-o", "--output", required=True, help="output .onnx path")
    p.add_argument("--opset", type=int, default=17, help="ai.onnx opset (default 17)")
    p.add_argument("--attention", choices=["sdpa", "eager"], default="sdpa",
                   help="transformers' attention implementation (default sdpa, transformers' own default)")
    args = p.parse_args(argv)
    if args.config and not args.random_init:
        p.error("--config needs --random-init")
    out = Path(args.output)
    export(load(args), out, args.opset)
    # The tokenizer and configs beside the model, as in a model folder.
    src = Path(args.model or Path(args.config).parent)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out.parent / name)
    if args.config:
        shutil.copy(args.config, out.parent / "config.json")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
