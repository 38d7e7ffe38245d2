#!/usr/bin/env python3
"""Export a transformers causal LM to a plain opset-21 ONNX graph for 1bit.

The graph is float32, ai.onnx domain only: no If/Loop, no custom ops, no
com.microsoft fusions. Two flavours:

default   input_ids [batch, sequence] int64
          -> logits [batch, sequence, vocab] float32
          The whole sequence is re-run every step (no cache).

--cached  input_ids [1, sequence] int64
          past      [2*layers, 1, kv_heads, past_sequence, head_dim] float32
          -> logits  [1, sequence, vocab] float32
          -> present [2*layers, 1, kv_heads, past_sequence + sequence, head_dim]
          Rows of past/present: layer0 key, layer0 value, layer1 key, ...
          Keys are stored after RoPE (and after Qwen3's k_norm), exactly as
          transformers' DynamicCache holds them. The prefill step passes
          past_sequence = 0.

Neither flavour takes attention_mask or position_ids. Positions are
past_sequence + arange(sequence) (past_sequence = 0 without a cache) and the
mask is the plain causal one, both built inside the graph from input shapes.
That is all a single-sequence greedy decoder needs; a batch in the default
graph must be unpadded rows of equal length.

Examples:
  # tiny random Qwen3 for tests (vocab kept so the real tokenizer works)
  python scripts/export_onnx.py --config scripts/configs/qwen3-tiny.json \\
      --random-init --seed 0 -o build-models/qwen3-tiny/model.onnx --check
  python scripts/export_onnx.py --config scripts/configs/qwen3-tiny.json \\
      --random-init --seed 0 --cached -o build-models/qwen3-tiny/model-cached.onnx
  # the real Qwen3-0.6B shape with random weights (~3 GB, external data)
  python scripts/export_onnx.py --config ../shared/models/qwen3/config-0.6b.json \\
      --random-init -o build-models/qwen3-0.6b/model.onnx --check
  # a local checkpoint directory
  python scripts/export_onnx.py --model build-models/smollm2-135m -o out.onnx
"""

from __future__ import annotations

import argparse
import ast
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Nothing here may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

import onnx_census
from onebit_tools.log import logger
from onebit_tools.ort import session

# "torchvision is not installed. Skipping torchvision::nms" and friends
logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)

OPSET = 21
# transformers' attention implementation the export traces: "eager" (explicit
# MatMul / Softmax), or "sdpa" (scaled_dot_product_attention, which torch.onnx
# writes as the Attention op at opset 23+); set by --attention.
ATTENTION = "eager"
# Above this many bytes of weights the graph is saved with external data.
# protobuf's hard limit is 2 GiB; stay clear of it.
EXTERNAL_DATA_THRESHOLD = int(1.8e9)
# Relative tolerance of the ONNX Runtime check: |ort - torch| <= TOL * max(1, max|torch|).
TOLERANCE = 1e-4
# --dtype float16: both round every op to float16, in their own orders.
TOLERANCE_F16 = 3e-2
# The export's element type (--dtype).
DTYPE = torch.float32


log = logger("export")


# --------------------------------------------------------------------------
# Step 1: the torch model
# --------------------------------------------------------------------------


def cut_layers(config, layers: int | None) -> None:
    """Keep the first `layers` decoder layers (a tiny graph for tests)."""
    if layers is None:
        return
    if layers < 1 or layers > config.num_hidden_layers:
        raise SystemExit(f"--layers {layers}: the model has {config.num_hidden_layers} layers")
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:layers]
    if getattr(config, "max_window_layers", None) is not None:
        config.max_window_layers = min(config.max_window_layers, layers)


@torch.no_grad()
def randomize_norms(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Give every norm weight its own values (1 + N(0, 0.05)).

    A fresh model has all RMSNorm weights equal to one; the exporter's
    optimizer would then merge them into one shared initializer, which no
    real checkpoint has. Slightly perturbed weights keep the graph shape-true.
    """
    for name, param in model.named_parameters():
        if param.dim() == 1 and "norm" in name:
            param.copy_(1.0 + 0.05 * torch.randn(param.shape, generator=generator))


def check_supported(config) -> None:
    """The in-graph mask is plain causal: refuse sliding-window layers."""
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"} or getattr(config, "use_sliding_window", False):
        raise SystemExit(f"layer types {sorted(kinds)}: only full causal attention is supported")


def load_pretrained(path: str, layers: int | None = None) -> torch.nn.Module:
    """A local checkpoint as a float32, eval-mode causal LM with eager attention."""
    config = AutoConfig.from_pretrained(path)
    cut_layers(config, layers)
    check_supported(config)
    # Eager attention lowers to MatMul, Mul(scale), Add(mask), Softmax, MatMul.
    # sdpa exports too, but its decomposition adds shape plumbing and splits
    # the scale over q and k (197 nodes instead of 179 for the tiny Qwen3);
    # at opset 23+ it becomes the Attention op (--attention sdpa).
    config._attn_implementation = ATTENTION
    log(f"loading checkpoint {path}")
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32, attn_implementation=ATTENTION)
    return model.to(DTYPE).eval()


def load_random(config_path: str, layers: int | None = None, seed: int = 0) -> torch.nn.Module:
    """Random weights of the config's shapes, seeded."""
    config = AutoConfig.from_pretrained(config_path)
    cut_layers(config, layers)
    check_supported(config)
    config._attn_implementation = ATTENTION
    log(f"random init from {config_path} (seed {seed})")
    torch.manual_seed(seed)
    # transformers' own init: normal(0, initializer_range) for linear and
    # embedding weights, which gives small but non-degenerate logits.
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=ATTENTION)
    randomize_norms(model, torch.Generator().manual_seed(seed + 1))
    return model.to(DTYPE).eval()


@dataclass
class ModelShape:
    layers: int
    kv_heads: int
    head_dim: int
    vocab: int

    @staticmethod
    def of(model) -> "ModelShape":
        c = model.config
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        return ModelShape(c.num_hidden_layers, c.num_key_value_heads, head_dim, c.vocab_size)


# --------------------------------------------------------------------------
# Step 2: the wrapper that fixes the graph's inputs and outputs
# --------------------------------------------------------------------------


def causal_mask(seq: int, past: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [1, 1, seq, past + seq]: 0 where query i may see key j.

    Query i sits at absolute position past + i; it sees keys 0 .. past + i.
    Uses finfo.min rather than -inf, as transformers' eager path does.
    """
    query_pos = torch.arange(seq) + past  # (seq,)
    key_pos = torch.arange(past + seq)  # (past + seq,)
    visible = key_pos[None, :] <= query_pos[:, None]  # (seq, past + seq)
    zero = torch.tensor(0.0, dtype=dtype)
    blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    return torch.where(visible, zero, blocked)[None, None]


class CausalLMExport(torch.nn.Module):
    """input_ids [, past] -> logits [, present] around a transformers causal LM."""

    def __init__(self, lm: torch.nn.Module, cached: bool):
        super().__init__()
        self.lm = lm
        self.cached = cached
        self.shape = ModelShape.of(lm)
        self.dtype = next(lm.parameters()).dtype  # the activations' (and cache's) type

    def forward(self, input_ids: torch.Tensor, past: torch.Tensor | None = None):
        seq = input_ids.shape[1]
        past_len = past.shape[3] if self.cached else 0
        position_ids = (torch.arange(seq) + past_len)[None, :]  # (1, seq)
        mask = causal_mask(seq, past_len, self.dtype)  # (1, 1, seq, past_len + seq)
        if not self.cached:
            out = self.lm(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False)
            return out.logits
        # past (2*layers, 1, kv_heads, past_len, head_dim) -> [(key, value)] per layer
        rows = past.unbind(0)
        cache = DynamicCache(ddp_cache_data=[(rows[2 * i], rows[2 * i + 1]) for i in range(self.shape.layers)])
        out = self.lm(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, cache=cache, use_cache=True
        )
        present = torch.stack([t for layer in out.cache.layers for t in (layer.keys, layer.values)])
        return out.logits, present


def sample_inputs(shape: ModelShape, cached: bool, batch: int, seq: int, past_len: int, seed: int,
                  dtype: torch.dtype = torch.float32):
    """Random token ids (and a random past) as the torch/ORT inputs."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, shape.vocab, (batch, seq), generator=g, dtype=torch.int64)
    if not cached:
        return (ids,)
    past = torch.randn((2 * shape.layers, 1, shape.kv_heads, past_len, shape.head_dim), generator=g).to(dtype)
    return (ids, past)


# --------------------------------------------------------------------------
# Step 3: torch.onnx (dynamo) export
# --------------------------------------------------------------------------


def export_program(wrapper: CausalLMExport, opset: int = OPSET) -> ir.Model:
    """torch.export + torch.onnx at opset 21 with the onnxscript optimizer.

    Sample sizes are >= 2 on purpose: torch.export specialises a dimension
    that is 0 or 1 in the sample to a constant.
    """
    seq = torch.export.Dim("sequence")
    if wrapper.cached:
        past = torch.export.Dim("past_sequence")
        args = sample_inputs(wrapper.shape, True, batch=1, seq=3, past_len=4, seed=0, dtype=wrapper.dtype)
        dynamic_shapes = {"input_ids": {1: seq}, "past": {3: past}}
        input_names, output_names = ["input_ids", "past"], ["logits", "present"]
    else:
        batch = torch.export.Dim("batch")
        args = sample_inputs(wrapper.shape, False, batch=2, seq=5, past_len=0, seed=0)
        dynamic_shapes = {"input_ids": {0: batch, 1: seq}}
        input_names, output_names = ["input_ids"], ["logits"]
    with torch.no_grad():
        program = torch.onnx.export(
            wrapper,
            args,
            dynamo=True,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            optimize=True,
            verbose=False,
        )
    return program.model


# --------------------------------------------------------------------------
# Step 4: tidy names, stamp metadata, save
# --------------------------------------------------------------------------

FOLDED_FROM = "pkg.onnxscript.optimizer.folded_from"
WRAPPER_PREFIX = "lm."


def _strip(name: str) -> str:
    return name[len(WRAPPER_PREFIX) :] if name.startswith(WRAPPER_PREFIX) else name


def tidy(model: ir.Model) -> None:
    """Readable names, no exporter debris.

    - initializers lose the wrapper's "lm." prefix; a weight the optimizer
      transposed for MatMul (stored [K, N], torch keeps [N, K]) is named
      after its parameter with "_T" (model.layers.0.mlp.up_proj.weight_T);
    - nodes are named "<module path>/<exporter node name>", e.g.
      model.layers.3.mlp.down_proj/linear_13, so 1bit's errors can name them;
    - per-node metadata (stack traces with local paths, fx text) is dropped.
    """
    graph = model.graph
    taken = set(graph.initializers)
    renames = {}
    for name, value in graph.initializers.items():
        new = _strip(name)
        origin = value.meta.get(FOLDED_FROM) or set()
        params = [o for o in origin if o.startswith(WRAPPER_PREFIX)]
        if name.startswith("val_") and len(params) == 1:
            new = _strip(params[0]) + "_T"
        if new != name and new not in taken:
            renames[name] = new
            taken.add(new)
    for old, new in renames.items():
        value = graph.initializers.pop(old)
        value.name = new
        graph.initializers[new] = value
    for value in graph.initializers.values():
        value.metadata_props.clear()
    for node in graph:
        scope = node.metadata_props.get("pkg.torch.onnx.name_scopes")
        base = node.name[5:] if node.name and node.name.startswith("node_") else node.name
        if scope:
            # a repr'd list of module paths, the last entry being the fx node;
            # "_"-prefixed entries are exporter hooks, not modules
            modules = [p for p in ast.literal_eval(scope)[:-1] if p and not p.startswith("_")]
            path = _strip(modules[-1]) if modules else ""
            node.name = f"{path}/{base}" if path else base
        node.metadata_props.clear()
        for out in node.outputs:
            out.metadata_props.clear()


def stamp_metadata(model: ir.Model, hf_model, cached: bool, source: str) -> None:
    """Model-level metadata the 1bit binding may read (all strings)."""
    shape = ModelShape.of(hf_model)
    c = hf_model.config
    eos = c.eos_token_id if not isinstance(c.eos_token_id, list) else c.eos_token_id[0]
    props = {
        "onebit.source": source,
        "onebit.architecture": type(hf_model).__name__,
        "onebit.num_layers": str(shape.layers),
        "onebit.num_kv_heads": str(shape.kv_heads),
        "onebit.head_dim": str(shape.head_dim),
        "onebit.vocab_size": str(shape.vocab),
        "onebit.bos_token_id": str(c.bos_token_id),
        "onebit.eos_token_id": str(eos),
        "onebit.cached": "1" if cached else "0",
    }
    if cached:
        props["onebit.past_layout"] = "[2*layers,1,kv_heads,past_sequence,head_dim] rows k0,v0,k1,v1,..."
    model.metadata_props.update(props)
    model.producer_name = "1bit scripts/export_onnx.py"


def save(model: ir.Model, path: Path, external: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()
    if external:
        # Tensors above 64 KiB start on a 4 KiB boundary, so an mmapped
        # weight is page-aligned (and thus SIMD-aligned) in memory.
        ir.save(model, str(path), external_data=data.name, alignment=4096, align_threshold=64 * 1024)
    else:
        ir.save(model, str(path))


def weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


# --------------------------------------------------------------------------
# Step 5: check against onnxruntime
# --------------------------------------------------------------------------


def _session(path: Path) -> ort.InferenceSession:
    # A float16 graph with onnxruntime's buffer reuse off (onebit_tools/ort.py).
    return session(path, quiet=True, mem_reuse=DTYPE == torch.float32)


def _diff(name: str, got: np.ndarray, ref: np.ndarray) -> float:
    if got.shape != ref.shape:
        raise SystemExit(f"verify: {name}: onnxruntime shape {got.shape}, torch shape {tuple(ref.shape)}")
    got, ref = got.astype(np.float32), np.asarray(ref, dtype=np.float32)
    d = float(np.abs(got - ref).max()) if got.size else 0.0
    tol = TOLERANCE if DTYPE == torch.float32 else TOLERANCE_F16
    limit = tol * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    top1 = ""
    if name.startswith("logits"):
        same = (got.argmax(-1) == ref.argmax(-1)).mean()
        top1 = f", top-1 agreement {same:.3f}"
    log(f"verify {name:<28} max|ort - torch| = {d:.3e} (limit {limit:.1e}{top1})")
    if not d <= limit:
        raise SystemExit(f"verify: {name}: max abs diff {d:.3e} exceeds {limit:.1e}")
    return d


@torch.no_grad()
def verify_default(wrapper: CausalLMExport, path: Path, seed: int) -> float:
    """ORT logits vs torch logits, at two (batch, sequence) sizes."""
    sess = _session(path)
    worst = 0.0
    for batch, seq in [(2, 9), (1, 4)]:
        (ids,) = sample_inputs(wrapper.shape, False, batch, seq, 0, seed)
        ref = wrapper.lm(input_ids=ids, use_cache=False).logits.float().numpy()
        got = sess.run(["logits"], {"input_ids": ids.numpy()})[0]
        worst = max(worst, _diff(f"logits b={batch} s={seq}", got, ref))
    return worst


@torch.no_grad()
def verify_cached(wrapper: CausalLMExport, path: Path, seed: int) -> float:
    """Prefill (past 0) + a 1-token step + a 3-token chunk vs one uncached torch run."""
    sess = _session(path)
    steps = [7, 1, 3]
    (ids,) = sample_inputs(wrapper.shape, False, 1, sum(steps), 0, seed)
    ref = wrapper.lm(input_ids=ids, use_cache=False).logits.float().numpy()
    ref_cache = wrapper.lm(input_ids=ids, use_cache=True).cache
    ref_present = torch.stack([t for layer in ref_cache.layers for t in (layer.keys, layer.values)]).float().numpy()
    s = wrapper.shape
    past = np.zeros((2 * s.layers, 1, s.kv_heads, 0, s.head_dim),
                    dtype=np.float16 if wrapper.dtype == torch.float16 else np.float32)
    worst, start = 0.0, 0
    for n in steps:
        logits, present = sess.run(["logits", "present"], {"input_ids": ids[:, start : start + n].numpy(), "past": past})
        label = f"logits past={start} s={n}"
        worst = max(worst, _diff(label, logits, ref[:, start : start + n]))
        start += n
        past = present
    worst = max(worst, _diff(f"present len={start}", past, ref_present))
    return worst


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


@dataclass
class ExportResult:
    path: Path
    seconds: float
    max_abs_diff: float
    external_data: bool


def export_model(
    hf_model, out: Path, cached: bool, external_data: bool | None = None, source: str = "", seed: int = 0, verify: bool = True,
    opset: int = OPSET,
) -> ExportResult:
    """Export one graph (default or cached), save it, check it with ORT."""
    wrapper = CausalLMExport(hf_model, cached).eval()
    kind = "cached" if cached else "default"
    log(f"exporting {kind} graph -> {out}")
    t0 = time.time()
    model = export_program(wrapper, opset)
    tidy(model)
    stamp_metadata(model, hf_model, cached, source)
    nbytes = weight_bytes(model)
    external = bool(external_data) or nbytes > EXTERNAL_DATA_THRESHOLD
    log(f"saving ({nbytes / 1e6:.1f} MB of weights{', external data' if external else ''})")
    save(model, out, external)
    del model
    seconds = time.time() - t0
    log(f"{kind} export took {seconds:.1f} s")
    onnx.checker.check_model(str(out))  # path form: handles external data and > 2 GB
    diff = float("nan")
    if verify:
        diff = (verify_cached if cached else verify_default)(wrapper, out, seed)
    return ExportResult(out, seconds, diff, external)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__[__doc__.index("Examples:") :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="local transformers checkpoint directory")
    src.add_argument("--config", help="config.json; use with --random-init")
    p.add_argument("--random-init", action="store_true", help="random weights of the config's shapes")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-init and the check prompt (default 0)")
    p.add_argument("--layers", type=int, help="keep only the first N decoder layers")
    p.add_argument("-o", "--output", required=True, help="output .onnx path")
    p.add_argument("--cached", action="store_true", help="export with the stacked KV cache (past/present)")
    p.add_argument(
        "--external-data",
        action="store_true",
        help=f"weights in <output>.data (automatic above {EXTERNAL_DATA_THRESHOLD / 1e9:.1f} GB)",
    )
    p.add_argument("--check", action="store_true", help="print the graph census after export")
    p.add_argument("--attention", choices=["eager", "sdpa"], default="eager",
                   help="attention as traced: eager (MatMul/Softmax) or sdpa (the Attention op at opset 23+)")
    p.add_argument("--opset", type=int, default=OPSET,
                   help=f"ai.onnx opset to export at (default {OPSET}; 23+ lets torch.onnx write Attention, "
                        "RMSNormalization and RotaryEmbedding)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32",
                   help="weights, activations and cache: float32, float16 (a float16 export; torch runs the "
                        "check in float16 on the CPU) or bfloat16 (as a bfloat16 checkpoint exports unconverted; "
                        "onnxruntime has no CPU kernels for its bfloat16 ops, so there is no onnxruntime check: "
                        "scripts/tests/test_bf16.py compares 1bit with torch)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime comparison")
    args = p.parse_args(argv)
    if args.config and not args.random_init:
        p.error("--config needs --random-init (there are no weights to load)")
    if args.model and args.random_init:
        p.error("--random-init goes with --config, not --model")
    return args


def main(argv=None) -> int:
    global ATTENTION, DTYPE
    args = parse_args(argv)
    ATTENTION = args.attention
    DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(args.dtype, torch.float32)
    if DTYPE == torch.bfloat16 and not args.no_verify:
        log("bfloat16: onnxruntime has no CPU kernels for the graph's bfloat16 ops (Where, ...); no onnxruntime check")
        args.no_verify = True
    torch.set_grad_enabled(False)
    t0 = time.time()
    if args.model:
        hf_model = load_pretrained(args.model, args.layers)
    else:
        hf_model = load_random(args.config, args.layers, args.seed)
    log(f"model ready in {time.time() - t0:.1f} s: {ModelShape.of(hf_model)}")
    source = args.model or f"{args.config} random-init seed={args.seed}"
    if args.layers:
        source += f" layers={args.layers}"
    result = export_model(
        hf_model,
        Path(args.output),
        args.cached,
        external_data=args.external_data,
        source=source,
        seed=args.seed,
        verify=not args.no_verify,
        opset=args.opset,
    )
    if args.check:
        print(onnx_census.format_census(onnx_census.census(str(result.path))))
    log(f"done: {result.path} (export {result.seconds:.1f} s, max abs diff {result.max_abs_diff:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
