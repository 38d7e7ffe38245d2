#!/usr/bin/env python3
"""Quantize a float ONNX export to a qdq graph: the format is A8W8 QDQ, int8
weights and int8/uint8 activations in QuantizeLinear/DequantizeLinear pairs
with static (calibrated) scales. 1bit's name for this path is "qdq".

The graph that comes out is plain ONNX: every quantized MatMul reads

    x_q --DequantizeLinear(s_x, zp_x)--> MatMul <--DequantizeLinear(s_w, zp_w)-- w_q (int8 initializer)
                                           |
                                           +--> QuantizeLinear(s_y, zp_y) --> DequantizeLinear --> ...

which is the group 1bit fuses into one integer GEMM (DESIGN.md, "Fused A8W8
group"; graph/qdq_fusion.cpp). Any opset-21 runtime can still run the file.

Two producers:
  quark  AMD Quark's ONNX flow: quark.onnx.ModelQuantizer(QConfig(...)).quantize_model,
         the QConfig's global QLayerConfig holding an Int8Spec/UInt8Spec for
         the activations (input_tensors) and for the weights
         (QuantGranularity.Channel with --per-channel), MinMax calibration,
         extra options OpTypesToQuantize=[MatMul], MatMulConstBOnly,
         OptimizeModel=False (ORT's optimizer would write com.microsoft fusions).
  ort    onnxruntime.quantization.quantize_static, QuantFormat.QDQ,
         nodes_to_quantize = the constant-weight MatMuls (its QDQ quantizer
         ignores MatMulConstBOnly).
Q/DQ nodes keep the domain the producer gives them (1bit takes ai.onnx and
com.microsoft alike; at opset 21 with int8 both write ai.onnx); opset imports
no node uses (Quark adds com.amd.quark) are dropped.

--matmul-only (the default) quantizes exactly the MatMuls whose B input is a
constant weight: the seven projections per layer and the LM head. Attention's
QK^T and AV have two run-time operands: quantizing them would add a Q/DQ pair
per operand per step, cost accuracy (softmax probabilities in int8), and buy
nothing, because 1bit fuses only groups with a constant weight (it refuses
them as weight_not_constant and runs the DQs as float ops). The other ops
(norms, RoPE, residual adds) stay float for the same reason: a Q/DQ pair
around a float op is only rounding. --no-matmul-only hands the whole graph to
the producer's default op set instead (for comparison exports).

Changes to the graph around the producers:
  - The tied LM head of Qwen3 / SmolLM2 exports is MatMul(x, Transpose(E))
    with E shared with the embedding Gather. Both producers quantize only a
    MatMul whose B is an initializer, so the Transpose is folded into its own
    initializer first (E^T, e.g. lm_head.weight_T); the Gather keeps the
    float table.
  - Both producers put a Q/DQ pair on every quantized MatMul's output, the
    LM head's too, which would hand out logits on an int8 grid (ties for
    greedy argmax). A Q/DQ pair that ends at a graph output is dropped: the
    LM head stays a fused group with float output.

Calibration is MinMax over --calib-samples sequences of --calib-len tokens
(default 32 x 512) cut from the Python standard library's own source: the
top-level stdlib modules sorted by name, those with at least --calib-len
tokens, --calib-samples of them spread evenly over that list, one window from
the middle of each file. It is deterministic for a given Python (the venv's
3.11.7) and downloads nothing; the chosen files are written to the model
metadata (onebit.calibration). Tokenizer: tokenizer.json beside the model, else
--tokenizer, else the shared Qwen3 tokenizer for a model whose vocabulary is
Qwen3's (random-init Qwen3 exports). For a --cached export the calibration
step is the prefill (past_sequence = 0).

Memory. Quark's flow holds five to six copies of the model it is given
(measured: peak ~1 GB + 5.5 x the weights), which puts Qwen3-0.6B near the
machine's 23 GB. So, with the default --quark-calibrator lean, this script
runs the MinMax pass itself (calibrate_minmax: Quark's tensors and
arithmetic, ranges bit-identical to Quark's calibrator on SmolLM2; in a
forked child, so its session's memory is returned before Quark starts) and
hands Quark the ranges through its SaveAndRestore file, which makes Quark skip its
calibration and trial run; and since Quark then never runs the model, the
embedding table (read only by the Gather) is given to it as a one-row
stand-in and put back afterwards (stub_tables). The output is unchanged by
either (checked: identical initializers and nodes). --ranges FILE keeps the
ranges, so a per-tensor and a per-channel export of one float model
calibrate once. A watchdog exits (3) when MemAvailable drops below
--min-free-gb: the machine is shared.

Accuracy. This is plain MinMax A8W8 with one activation scale per tensor (no
SmoothQuant, no percentile clipping): it exists to exercise 1bit's fused
path, not to ship a model. Real LLM activations carry rare huge values (the
residual stream and the down_proj inputs: thousands against a typical few),
and one int8 scale per tensor then leaves the other values a handful of
levels; the onnxruntime check below shows what that costs per export.
--no-output-q keeps the MatMul outputs (which feed the residual adds) float
and leaves 1bit fused groups without Q; it helps only a little, because the
down_proj inputs carry such values too.

Output: weights go to <out>.data (tensors above 64 KiB 4 KiB-aligned, as
export_onnx.py writes them) when the float model had external data, the
result exceeds 1.8 GB, or --external-data. The float model's metadata
(onebit.*) is kept and onebit.quantization / onebit.calibration added, so
`1bit ort-run` runs the quantized graph unchanged. The census is printed
before and after, then an onnxruntime check of one short sample (float vs
qdq logits: top-1 agreement, max |diff|), times and peak RSS.

Examples:
  # Qwen3-0.6B shape, Quark, per-channel weights, int8 symmetric activations,
  # then per-tensor from the same ranges
  scripts/run_python.sh scripts/quantize_qdq.py build-models/qwen3-0.6b/model.onnx \\
      -o build-models/qwen3-0.6b/model-qdq-quark-pc.onnx --per-channel \\
      --ranges build-models/qwen3-0.6b/qdq-ranges-model.json
  scripts/run_python.sh scripts/quantize_qdq.py build-models/qwen3-0.6b/model.onnx \\
      -o build-models/qwen3-0.6b/model-qdq-quark-pt.onnx \\
      --ranges build-models/qwen3-0.6b/qdq-ranges-model.json
  # the same with onnxruntime's quantizer, per-tensor, uint8 asymmetric activations
  scripts/run_python.sh scripts/quantize_qdq.py build-models/qwen3-0.6b/model.onnx \\
      -o out.onnx --producer ort --activation-type uint8 --activation-asymmetric
  # quick test on the tiny model: 2 sequences of 64 tokens
  scripts/run_python.sh scripts/quantize_qdq.py build/models/qwen3-tiny/model.onnx \\
      -o /tmp/tiny-qdq.onnx --calib-samples 2 --calib-len 64
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationDataReader

import onnx_census
from onebit_tools.log import logger
from onebit_tools.ort import session

QWEN3_TOKENIZER = Path(__file__).resolve().parents[1].parent / "shared/models/qwen3/tokenizer.json"
QWEN3_VOCAB = 151936
# Same threshold as export_onnx.py: protobuf's hard limit is 2 GiB.
EXTERNAL_DATA_THRESHOLD = int(1.8e9)
ELEM_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}
log = logger("qdq", clock=True)


def watch_memory(min_free_gb: float) -> None:
    """Exit(3) from a daemon thread when MemAvailable falls below min_free_gb (the machine is shared)."""

    def available_gb() -> float:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) / 1e6

    def loop() -> None:
        while True:
            if available_gb() < min_free_gb:
                log(f"MemAvailable below {min_free_gb} GB (peak RSS {peak_rss_gb():.2f} GB): stopping")
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=loop, daemon=True).start()


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # ru_maxrss is in kB on Linux


# --------------------------------------------------------------------------
# Calibration text: windows of the Python standard library's source
# --------------------------------------------------------------------------


def calibration_ids(tokenizer_path: Path, samples: int, length: int) -> tuple[list[np.ndarray], list[str]]:
    """`samples` int64 arrays of `length` token ids, and the file each came from."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(root.glob("*.py"))
    encoded = tok.encode_batch([p.read_text(encoding="utf-8", errors="replace") for p in paths], add_special_tokens=False)
    # (name, ids) of the top-level modules with enough tokens, sorted by name
    eligible = [(p.name, e.ids) for p, e in zip(paths, encoded) if len(e.ids) >= length]
    if len(eligible) < samples:
        raise SystemExit(f"error: {root} has {len(eligible)} modules of >= {length} tokens, need {samples}")
    out, names = [], []
    for i in range(samples):
        name, ids = eligible[i * len(eligible) // samples]
        start = (len(ids) - length) // 2
        out.append(np.asarray(ids[start : start + length], dtype=np.int64))
        names.append(name)
    return out, names


def pick_tokenizer(model_path: Path, explicit: Path | None, vocab: int | None) -> Path:
    if explicit:
        return explicit
    beside = model_path.parent / "tokenizer.json"
    if beside.exists():
        return beside
    if vocab == QWEN3_VOCAB and QWEN3_TOKENIZER.exists():
        return QWEN3_TOKENIZER
    raise SystemExit(f"error: no tokenizer.json beside {model_path}; pass --tokenizer")


class TokenReader(CalibrationDataReader):
    """CalibrationDataReader over fixed token windows (both producers take this protocol).

    A cached graph's `past` input gets an empty cache (past_sequence = 0): the
    calibration step is the prefill.
    """

    def __init__(self, model: onnx.ModelProto, windows: list[np.ndarray], files: list[str]):
        self.files = files
        self.feeds = []
        for ids in windows:
            feed = {}
            for vi in model.graph.input:
                tt = vi.type.tensor_type
                if vi.name == "input_ids":
                    feed[vi.name] = ids[None, :].astype(ELEM_NP[tt.elem_type])
                elif vi.name == "past":
                    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
                    dims[1] = 1  # batch
                    feed[vi.name] = np.zeros(dims, dtype=ELEM_NP[tt.elem_type])
                else:
                    raise SystemExit(f"error: calibration does not know how to feed input '{vi.name}'")
            self.feeds.append(feed)
        self.pos = 0

    def get_next(self):
        if self.pos >= len(self.feeds):
            return None
        self.pos += 1
        return self.feeds[self.pos - 1]

    def rewind(self) -> None:
        self.pos = 0

    def __len__(self) -> int:
        return len(self.feeds)


# --------------------------------------------------------------------------
# The float graph the producers see
# --------------------------------------------------------------------------


def fold_weight_transposes(model: onnx.ModelProto) -> list[str]:
    """Transpose(initializer) read only as MatMul B -> a transposed initializer of its own.

    Returns the names of the folded initializers. The original stays if
    anything else reads it (the tied embedding's Gather).
    """
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    folded = []
    for n in list(g.node):
        if n.op_type != "Transpose" or n.domain not in ("", "ai.onnx") or n.input[0] not in inits:
            continue
        users = readers.get(n.output[0], [])
        if not users or not all(u.op_type == "MatMul" and list(u.input).index(n.output[0]) == 1 for u in users):
            continue
        w = numpy_helper.to_array(inits[n.input[0]])
        perm = next((list(a.ints) for a in n.attribute if a.name == "perm"), None)
        name = n.input[0] + "_T"
        g.initializer.append(numpy_helper.from_array(np.ascontiguousarray(np.transpose(w, perm)), name))
        for u in users:
            u.input[1] = name
        g.node.remove(n)
        folded.append(name)
    # An initializer nobody reads any more (an untied LM head) goes away.
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for t in [t for t in g.initializer if t.name not in used]:
        g.initializer.remove(t)
    return folded


def constant_b_matmuls(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [n.name for n in model.graph.node
            if n.op_type == "MatMul" and n.domain in ("", "ai.onnx") and n.input[1] in inits]


# --------------------------------------------------------------------------
# Producers
# --------------------------------------------------------------------------


def _slim_quark_calibration() -> None:
    """Keep only the ReduceMin/ReduceMax outputs of each calibration run.

    Quark's MinMaxCalibrater.collect_data stores every session output of every
    sample until the end, the model's own logits included: 32 x 311 MB for
    Qwen3-0.6B at 512 tokens. Only the added range outputs are read
    (compute_data drops the original outputs by name), so each original output
    is replaced by a one-element placeholder as it arrives; the ranges are
    unchanged. onnxruntime's own MinMaxCalibrater does the same with None.
    """
    from quark.onnx.calibration import calibrators

    base = calibrators.OverridedMinMaxCalibrater
    if getattr(base, "_onebit_slim", False):
        return
    create = base.create_inference_session

    class SlimSession:
        def __init__(self, session, drop: set[str]):
            self._session = session
            self._drop = [o.name in drop for o in session.get_outputs()]

        def run(self, output_names, feed, *args, **kwargs):
            outs = self._session.run(output_names, feed, *args, **kwargs)
            if output_names is not None:
                return outs
            return [np.zeros(1, np.float32) if d else o for d, o in zip(self._drop, outs)]

        def __getattr__(self, name):
            return getattr(self._session, name)

    def create_slim(self) -> None:
        create(self)
        self.infer_session = SlimSession(self.infer_session, set(self.model_original_outputs))

    base.create_inference_session = create_slim
    base._onebit_slim = True


def calibrate_minmax(src: Path, reader: TokenReader, out_json: Path, stamp: dict) -> int:
    """MinMax ranges of every float tensor a MatMul reads or writes, as Quark's "SaveAndRestore" JSON.

    The same tensors and the same arithmetic as Quark's MinMaxCalibrater
    (ReduceMin/ReduceMax appended to the graph, min of the minima and max of
    the maxima over the samples, onnxruntime with ORT_DISABLE_ALL and its
    default prepacking; the ranges come out bit-identical to Quark's), but
    one session on the float model with the external data left on disk,
    instead of Quark's calibrator, which deep-copies the model and runs it
    after a separate trial run. Quark restores the file and skips its
    calibration and the trial run. Returns the number of tensors.
    """
    model = onnx.load(str(src), load_external_data=False)
    g = model.graph
    inits = {t.name for t in g.initializer}
    targets: list[str] = []
    for n in g.node:
        if n.op_type == "MatMul" and n.domain in ("", "ai.onnx"):
            targets += [t for t in list(n.input) + list(n.output) if t and t not in inits and t not in targets]
    fetch = []
    for t in targets:
        for op in ("ReduceMin", "ReduceMax"):
            fetch.append(f"{t}/onebit_{op}")
            g.node.append(onnx.helper.make_node(op, [t], [fetch[-1]], keepdims=0))
            g.output.append(onnx.helper.make_tensor_value_info(fetch[-1], onnx.TensorProto.FLOAT, []))
    augmented = src.with_name("calibrate.onnx")  # beside src: the external data references stay valid
    onnx.save(model, str(augmented))
    del model
    sess = session(augmented, opt="disable", quiet=True)
    lo = np.full(len(targets), np.inf, np.float32)
    hi = np.full(len(targets), -np.inf, np.float32)
    reader.rewind()
    for i, feed in enumerate(iter(reader.get_next, None)):
        values = np.asarray(sess.run(fetch, feed), np.float32)
        lo, hi = np.minimum(lo, values[0::2]), np.maximum(hi, values[1::2])
        log(f"  calibration sample {i + 1}/{len(reader)}, peak RSS {peak_rss_gb():.2f} GB")
    reader.rewind()
    ranges = {t: (float(a), float(b)) for t, a, b in zip(targets, lo, hi)}
    out_json.write_text(json.dumps({"tensors_range": ranges, "onebit": stamp}, indent=1))
    return len(ranges)


def calibrate_in_child(src: Path, reader: TokenReader, out_json: Path, stamp: dict, min_free_gb: float) -> int:
    """calibrate_minmax in a forked child: the calibration session's memory (weights, prepacked
    weights, activations) goes back to the system before Quark starts, instead of staying in
    this process's heap under Quark's own peak."""
    ctx = multiprocessing.get_context("fork")
    result = ctx.Queue()

    def child() -> None:
        watch_memory(min_free_gb)
        result.put(calibrate_minmax(src, reader, out_json, stamp))

    p = ctx.Process(target=child)
    p.start()
    p.join()
    if p.exitcode != 0:
        raise SystemExit(f"error: calibration failed (child exit {p.exitcode})")
    # The only child waited for so far (Quark and torch come later): its own peak.
    log(f"calibration child peak RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6:.2f} GB")
    return result.get()


def stub_tables(src: Path, dst: Path, min_bytes: int = 64 << 20) -> list[str]:
    """Write `dst` beside `src`: `src` with every big initializer no MatMul reads cut to one row.

    That is the embedding table the Gather reads (622 MB for Qwen3-0.6B).
    In a MatMul-only run with restored ranges Quark neither quantizes nor
    runs it, but holds five to six copies of every byte it is given, so it
    sees a [1, hidden] stand-in and finish() puts the real table back.
    Returns the names cut.
    """
    model = onnx.load(str(src), load_external_data=False)
    g = model.graph
    matmul_inputs = {i for n in g.node if n.op_type == "MatMul" for i in n.input}
    cut = []
    for i, t in enumerate(g.initializer):
        nbytes = int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        if t.name in matmul_inputs or nbytes < min_bytes or len(t.dims) < 2:
            continue
        stub = np.zeros([1, *t.dims[1:]], onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        g.initializer[i].CopyFrom(numpy_helper.from_array(stub, t.name))
        cut.append(t.name)
    onnx.save(model, str(dst))  # graph only: the other tensors still point at src's data file
    return cut


def quantize_quark(src: Path, dst: Path, reader: TokenReader, args, nodes: list[str] | None, external: bool,
                   tmp: Path) -> list[str]:
    # Calibrate before Quark (and torch) are imported: the child process forks a small parent.
    ranges = tmp / "tensors_range.json"
    stamp = {"model": str(args.model.resolve()), "calibration": f"{args.calib_samples}x{args.calib_len}",
             "files": reader.files}
    if args.quark_calibrator == "lean":
        if args.ranges and args.ranges.exists():
            saved = json.loads(args.ranges.read_text())
            if saved.get("onebit") != stamp:
                raise SystemExit(f"error: {args.ranges} was calibrated for {saved.get('onebit')}, not {stamp}")
            ranges.write_text(args.ranges.read_text())
            log(f"ranges restored from {args.ranges}")
        else:
            count = calibrate_in_child(src, reader, ranges, stamp, args.min_free_gb)
            log(f"lean MinMax calibration of {count} tensors")
            if args.ranges:  # kept now: a failing Quark run does not cost the calibration
                args.ranges.write_text(ranges.read_text())

    from quark.onnx import CalibMethod, Int8Spec, ModelQuantizer, QConfig, QLayerConfig, QuantGranularity, UInt8Spec

    _slim_quark_calibration()
    method = {"minmax": CalibMethod.MinMax, "percentile": CalibMethod.Percentile}[args.calib_method]
    act_spec = {"int8": Int8Spec, "uint8": UInt8Spec}[args.activation_type]
    w_spec = {"int8": Int8Spec, "uint8": UInt8Spec}[args.weight_type]
    granularity = QuantGranularity.Channel if args.per_channel else QuantGranularity.Tensor
    extra = {
        "OptimizeModel": False,
        "TmpDir": str(tmp),
        "PrintSummary": args.verbose,
    }
    if not args.output_q:
        extra["OpTypesToExcludeOutputQuantization"] = ["MatMul"]
    if nodes is not None:
        # Quark honours MatMulConstBOnly (its NodesToQuantize draws an "invalid parameter" warning).
        extra.update({"OpTypesToQuantize": ["MatMul"], "MatMulConstBOnly": True})
    if args.quark_calibrator == "lean":
        extra["SaveAndRestore"] = str(ranges)  # exists: Quark restores it and does not calibrate
    elif args.ranges:
        extra["SaveAndRestore"] = str(ranges)  # absent: Quark calibrates and saves its ranges there
    config = QConfig(
        global_config=QLayerConfig(
            input_tensors=act_spec(symmetric=args.activation_symmetric, calibration_method=method),
            weight=w_spec(symmetric=args.weight_type == "int8", calibration_method=CalibMethod.MinMax,
                          quant_granularity=granularity),
        ),
        use_external_data_format=external,
        extra_options=extra,
    )
    stubbed = []
    if args.quark_calibrator == "lean" and nodes is not None:
        quark_input = src.with_name("quark-input.onnx")
        stubbed = stub_tables(src, quark_input)
        if stubbed:
            log(f"Quark sees one-row stand-ins for {stubbed} (not quantized, not run)")
            src = quark_input
    ModelQuantizer(config).quantize_model(str(src), str(dst), calibration_data_reader=reader)
    if args.ranges and not args.ranges.exists() and ranges.exists():
        saved = json.loads(ranges.read_text())
        args.ranges.write_text(json.dumps({**saved, "onebit": stamp}, indent=1))
    return stubbed


def quantize_ort(src: Path, dst: Path, reader: TokenReader, args, nodes: list[str] | None, external: bool,
                 tmp: Path) -> list[str]:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    qtype = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    quantize_static(
        str(src),
        str(dst),
        reader,
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"] if nodes is not None else None,
        nodes_to_quantize=nodes,
        per_channel=args.per_channel,
        activation_type=qtype[args.activation_type],
        weight_type=qtype[args.weight_type],
        calibrate_method={"minmax": CalibrationMethod.MinMax,
                          "percentile": CalibrationMethod.Percentile}[args.calib_method],
        use_external_data_format=external,
        extra_options={
            # ORT's QDQ quantizer ignores MatMulConstBOnly; nodes_to_quantize is what restricts it.
            "MatMulConstBOnly": nodes is not None,
            "ActivationSymmetric": args.activation_symmetric,
            "WeightSymmetric": args.weight_type == "int8",
            "OpTypesToExcludeOutputQuantization": [] if args.output_q else ["MatMul"],
        },
    )
    return []


PRODUCERS = {"quark": quantize_quark, "ort": quantize_ort}


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def float_outputs(model: ir.Model) -> list[str]:
    """Drop a QuantizeLinear -> DequantizeLinear pair that ends at a graph output.

    The producers quantize every quantized MatMul's output, the LM head's
    included, which would hand out logits on an int8 grid (one step is
    max|logit|/127): greedy argmax then meets ties. The LM head keeps its
    int8 inputs and runs as a fused group without the output Q (float out).
    Returns the outputs changed.
    """
    changed = []
    outputs = list(model.graph.outputs)
    for i, out in enumerate(outputs):
        dq = out.producer()
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        q = dq.inputs[0].producer() if dq.inputs[0] is not None else None
        if q is None or q.op_type != "QuantizeLinear" or len(q.outputs[0].uses()) != 1:
            continue
        y = q.inputs[0]
        if y.is_graph_output() or y.is_graph_input():
            continue
        name = out.name
        model.graph.outputs[i] = y
        model.graph.remove([dq, q], safe=True)
        y.name = name
        changed.append(name)
    return changed


def finish(produced: Path, out: Path, props: dict[str, str], external: bool, float_path: Path,
           stubbed: list[str]) -> bool:
    """Re-save the producer's graph at `out` with metadata `props`; unused opset imports dropped.

    Initializers named in `stubbed` get their real value back from `float_path`.
    Returns whether the weights went to external data.
    """
    model = ir.load(str(produced))
    if stubbed:
        real = ir.load(str(float_path)).graph.initializers
        for name in stubbed:
            value = model.graph.initializers[name]
            value.const_value = real[name].const_value
            value.shape = real[name].shape
    if changed := float_outputs(model):
        log(f"graph outputs kept float (output Q/DQ pair dropped): {changed}")
    used = {n.domain for n in model.graph.all_nodes()}
    for domain in [d for d in model.opset_imports if d not in ("", "ai.onnx") and d not in used]:
        del model.opset_imports[domain]
    q_domains = {n.domain for n in model.graph.all_nodes() if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    if q_domains - {"", "ai.onnx", "com.microsoft"}:
        raise SystemExit(f"error: the producer wrote Q/DQ in {sorted(q_domains)}; "
                         "1bit runs ai.onnx and com.microsoft only")
    model.metadata_props.clear()
    model.metadata_props.update(props)
    from export_onnx import save, weight_bytes  # torch + transformers: imported only here

    external = external or weight_bytes(model) > EXTERNAL_DATA_THRESHOLD
    save(model, out, external)  # the exporter's layout: <out>.data, big tensors 4 KiB-aligned
    return external


def ort_check(float_path: Path, quant_path: Path, feed: dict[str, np.ndarray], tokens: int) -> str:
    """Float vs qdq logits on one short calibration window, both through onnxruntime.

    ORT_ENABLE_BASIC: at EXTENDED/ALL onnxruntime 1.32's QDQPropagationTransformer
    fails on these graphs (either producer): it copies the DQ after a q/k/v
    projection past the Reshape as a new Q whose zero point it makes uint8
    against an int8 output_dtype ("Node (view_2_q) ... output_dtype INT8 does
    not match y_zero_point type UINT8").
    """
    feed = {k: (v[:, :tokens] if k == "input_ids" else v) for k, v in feed.items()}
    logits = []
    for path in (float_path, quant_path):
        sess = session(path, opt="basic", quiet=True)
        logits.append(sess.run(["logits"], feed)[0][0])
        del sess
    ref, got = logits
    top1 = float(np.mean(ref.argmax(-1) == got.argmax(-1)))
    return (
        f"ort check ({tokens} tokens): top-1 agreement {top1 * 100:.1f}%, "
        f"max|dlogit| {np.abs(ref - got).max():.4g} of max|logit| {np.abs(ref).max():.4g}"
    )


def size_of(path: Path) -> int:
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring (head -107 scripts/quantize_qdq.py) for details.")
    p.add_argument("model", type=Path, help="float32 ONNX export (scripts/export_onnx.py)")
    p.add_argument("-o", "--output", type=Path, required=True, help="quantized .onnx to write")
    p.add_argument("--producer", choices=sorted(PRODUCERS), default="quark")
    p.add_argument("--matmul-only", action=argparse.BooleanOptionalAction, default=True,
                   help="quantize only MatMuls with a constant weight (default; see the docstring)")
    p.add_argument("--per-channel", action="store_true", help="one weight scale per output column (default: per tensor)")
    sym = p.add_mutually_exclusive_group()
    sym.add_argument("--activation-symmetric", dest="activation_symmetric", action="store_true", default=True,
                     help="activation zero point 0 (int8) / 128 (uint8) (default, as Quark's A8W8 recipe)")
    sym.add_argument("--activation-asymmetric", dest="activation_symmetric", action="store_false",
                     help="activation zero point from the calibrated min/max")
    p.add_argument("--activation-type", choices=["int8", "uint8"], default="int8")
    p.add_argument("--output-q", action=argparse.BooleanOptionalAction, default=True,
                   help="quantize each MatMul's output too (default, the producers' A8W8 form: the fused group "
                        "ends in int8); --no-output-q keeps them float, so a residual-stream outlier does not "
                        "set one int8 scale for a whole tensor")
    p.add_argument("--weight-type", choices=["int8", "uint8"], default="int8",
                   help="int8 weights are symmetric (zero point 0); uint8 weights asymmetric "
                        "(with --producer ort only beside uint8 activations)")
    p.add_argument("--calib-samples", type=int, default=32)
    p.add_argument("--calib-len", type=int, default=512)
    p.add_argument("--calib-method", choices=["minmax", "percentile"], default="minmax")
    p.add_argument("--quark-calibrator", choices=["lean", "quark"], default="lean",
                   help="lean: this script's MinMax pass, restored into Quark (default; same ranges, a "
                        "fraction of the memory); quark: Quark's own calibrator (needed for percentile)")
    p.add_argument("--ranges", type=Path,
                   help="Quark's SaveAndRestore JSON: reused if it exists (same model and calibration only), "
                        "else written after calibrating; ranges do not depend on the weight granularity")
    p.add_argument("--min-free-gb", type=float, default=1.5,
                   help="stop (exit 3) if the machine's MemAvailable drops below this, to spare other jobs")
    p.add_argument("--tokenizer", type=Path, help="tokenizer.json (default: beside the model, or Qwen3's)")
    p.add_argument("--external-data", action=argparse.BooleanOptionalAction, default=None,
                   help="write weights to <output>.data (default: when the float model had external data or > 1.8 GB)")
    p.add_argument("--check-tokens", type=int, default=32, help="tokens of the onnxruntime float-vs-qdq check (0: skip)")
    p.add_argument("--verbose", action="store_true", help="let the producer print its summaries")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.min_free_gb > 0:
        watch_memory(args.min_free_gb)
    src: Path = args.model
    out: Path = args.output
    if out.resolve() == src.resolve():
        raise SystemExit("error: --output must differ from the input model")
    if args.calib_method != "minmax":
        args.quark_calibrator = "quark"
    if args.producer == "ort" and args.weight_type == "uint8" and args.activation_type != "uint8":
        raise SystemExit("error: onnxruntime's quantizer takes uint8 weights only with uint8 activations")

    print(f"== census before: {src}")
    print(onnx_census.format_census(onnx_census.census(str(src))))
    graph_only = onnx.load(str(src), load_external_data=False).graph
    float_external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in graph_only.initializer)

    log(f"loading {src}")
    model = onnx.load(str(src))
    vocab = next((int(p.value) for p in model.metadata_props if p.key == "onebit.vocab_size"), None)
    tokenizer = pick_tokenizer(src, args.tokenizer, vocab)
    windows, files = calibration_ids(tokenizer, args.calib_samples, args.calib_len)
    if vocab and max(int(w.max()) for w in windows) >= vocab:
        raise SystemExit(f"error: {tokenizer} makes ids >= the model's vocabulary ({vocab})")
    log(f"calibration: {args.calib_samples} x {args.calib_len} tokens ({tokenizer}) from stdlib "
        f"{files[0]} ... {files[-1]}")
    reader = TokenReader(model, windows, files)

    folded = fold_weight_transposes(model)
    nodes = constant_b_matmuls(model) if args.matmul_only else None
    log(f"folded weight transposes: {folded or 'none'}; "
        f"{len(nodes) if nodes is not None else 'all'} MatMuls to quantize")
    big = float_external or model.ByteSize() > EXTERNAL_DATA_THRESHOLD

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qdq-", dir=out.parent if out.parent.exists() else None) as tmp_dir:
        tmp = Path(tmp_dir)
        prepared = tmp / "float.onnx"
        onnx.save(model, str(prepared), save_as_external_data=big, location="float.onnx.data")
        float_props = {p.key: p.value for p in model.metadata_props}
        del model  # the producers load their own copy
        log(f"quantizing with {args.producer} ({'per-channel' if args.per_channel else 'per-tensor'} {args.weight_type} "
            f"weights, {'symmetric' if args.activation_symmetric else 'asymmetric'} {args.activation_type} activations, "
            f"{args.calib_method})")
        produced = tmp / "quant.onnx"
        t_q = time.perf_counter()
        stubbed = PRODUCERS[args.producer](prepared, produced, reader, args, nodes, big, tmp)
        quant_seconds = time.perf_counter() - t_q
        log(f"producer done in {quant_seconds:.1f} s, peak RSS so far {peak_rss_gb():.2f} GB")
        note = {
            "onebit.quantization": (
                f"qdq (A8W8) producer={args.producer} matmul_only={int(args.matmul_only)} output_q={int(args.output_q)} "
                f"weights={args.weight_type}/{'per_channel' if args.per_channel else 'per_tensor'} "
                f"activations={args.activation_type}/{'symmetric' if args.activation_symmetric else 'asymmetric'} "
                f"calibration={args.calib_method} {args.calib_samples}x{args.calib_len}"
            ),
            "onebit.calibration": f"python{sys.version_info.major}.{sys.version_info.minor} stdlib: " + ",".join(files),
        }
        external = finish(produced, out, {**float_props, **note}, big if args.external_data is None else args.external_data,
                          prepared, stubbed)
        check = ort_check(prepared, out, reader.feeds[0], args.check_tokens) if args.check_tokens else "ort check skipped"
    total = time.perf_counter() - t_start

    print(f"== census after: {out}")
    print(onnx_census.format_census(onnx_census.census(str(out))))
    log(check)
    log(f"wrote {out} ({size_of(out) / 1e6:.1f} MB{', external data' if external else ''}); "
        f"producer {quant_seconds:.1f} s, total {total:.1f} s, peak RSS {peak_rss_gb():.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
