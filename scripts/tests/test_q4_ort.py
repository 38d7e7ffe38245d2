"""4-bit weight-only (q4) graphs in 1bit against onnxruntime on the same inputs.

test_pack[VARIANT]   `1bit pack` the float model into Q4NX files (int4 block
        32, per channel, uint4 block 64, float16 scales), then for each file:
        the onnx checker passes; onnxruntime without graph optimizations
        (DequantizeLinear + float MatMul, the reference semantics) agrees
        with `1bit run --act-precision float` within --tol (max|d| / max|ort|
        over the logits); and with ORT_ENABLE_ALL the optimized graph is
        inspected for MatMulNBits (onnxruntime's DQ -> MatMul fusion), which
        is printed, not gated.
        float16 scales: DequantizeLinear's output is float16 then, so the
        graph rounds every dequantized weight (q·s, 15 significant bits) to
        float16's 11 before the Cast; 1bit's fused node multiplies in
        float32 and does not. That file is held to --tol against a twin
        whose scales are the same values as float32 (no Cast), and to
        F16_TOL (2⁻¹¹ relative per weight, summed) against itself.
test_nbits[VARIANT]  onnxruntime's own MatMulNBitsQuantizer (block 32,
        symmetric and with zero points) writes com.microsoft::MatMulNBits;
        onnxruntime (accuracy_level unset: float compute) against 1bit,
        act=float.

  pytest scripts/tests/test_q4_ort.py::test_pack --onebit build/1bit --model models/qwen3-tiny/model.onnx --work DIR

Default --model: the tiny export's model.onnx (--tiny). --work keeps the
files (default: a temporary directory).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import models, tiny
from onebit_tools import cli
from onebit_tools.ort import session

SEQ = 9
F16_TOL = 4e-3
PACK = {
    "int4-b32": ["--block", "32"],
    "int4-per-channel": ["--per-channel"],
    "uint4-b64": ["--block", "64", "--unsigned"],
    "int4-b32-f16": ["--block", "32", "--scale-type", "float16"],
}
NBITS = {"matmulnbits-b32-sym": True, "matmulnbits-b32-zp": False}


@pytest.fixture(scope="module")
def model(pytestconfig) -> Path:
    (m,) = models(pytestconfig, [tiny(pytestconfig) / "model.onnx"])
    return m


@pytest.fixture(scope="module")
def ids(model) -> np.ndarray:
    vocab = onnx.load(str(model), load_external_data=False).graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    return np.random.default_rng(3).integers(0, max(vocab, 2), size=(1, SEQ)).astype(np.int64)


def onebit_logits(onebit: str, model: Path, ids: np.ndarray) -> np.ndarray:
    return cli.run(onebit, model, {"input_ids": ids}, ["--act-precision", "float"]).outputs["logits"]


def ort_logits(model: Path, ids: np.ndarray, opt: str = "disable", optimized: Path | None = None) -> np.ndarray:
    return session(model, opt=opt, threads=2, optimized_path=optimized).run(["logits"], {"input_ids": ids})[0]


def rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - ref)) / max(1e-30, float(np.max(np.abs(ref)))))


def op_counts(path: Path) -> dict:
    counts: dict = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        key = (n.domain + "::" if n.domain else "") + n.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts


def float32_scale_twin(path: Path) -> Path:
    """The same graph with float16 scales widened (exactly) to float32 and the Casts after them dropped."""
    from onnx import numpy_helper

    m = onnx.load(str(path))
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    dq_out = {n.output[0] for n in m.graph.node if n.op_type == "DequantizeLinear"}
    rename = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Cast" and n.input[0] in dq_out}
    keep = [n for n in m.graph.node if not (n.op_type == "Cast" and n.input[0] in dq_out)]
    for n in keep:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    twin = path.with_name(path.stem + "-f32-twin.onnx")
    onnx.save(m, str(twin))
    return twin


def check_against_ort(name: str, onebit: str, path: Path, ids: np.ndarray, tol: float) -> None:
    ref = ort_logits(path, ids)
    got = onebit_logits(onebit, path, ids)
    r = rel(got, ref)
    top1 = float(np.mean(got[0].argmax(-1) == ref[0].argmax(-1)))
    print(f"{name}: 1bit (act float) vs onnxruntime (no optimization) rel {r:.3e} (tol {tol:g}), "
          f"top-1 agreement {top1 * 100:.0f}% over {ids.shape[1]} positions")
    assert r <= tol, f"{name}: rel {r:.3e} > tol {tol:g}"


@pytest.mark.parametrize("variant", list(PACK))
def test_pack(variant, onebit, model, ids, work, pytestconfig):
    tol = pytestconfig.getoption("tol")
    flags = PACK[variant]
    out = work / f"{variant}.onnx"
    cli.pack(onebit, model, out, flags)
    onnx.checker.check_model(str(out), full_check=True)
    counts = op_counts(out)
    print(f"{variant}: {counts.get('DequantizeLinear', 0)} DequantizeLinear, {counts.get('MatMul', 0)} MatMul")
    # onnxruntime's own optimized graph, reported only: does its DQ -> MatMul fusion fire?
    optimized = work / f"{variant}.ort-optimized.onnx"
    fused = ort_logits(out, ids, "all", optimized)
    oc = op_counts(optimized)
    print(f"  onnxruntime ORT_ENABLE_ALL: {oc.get('com.microsoft::MatMulNBits', 0)} MatMulNBits, "
          f"{oc.get('DequantizeLinear', 0)} DequantizeLinear left; its logits vs unoptimized rel "
          f"{rel(fused, ort_logits(out, ids)):.3e}")
    if "--scale-type" not in flags:
        check_against_ort(variant, onebit, out, ids, tol)
        return
    got = onebit_logits(onebit, out, ids)
    r_twin = rel(got, ort_logits(float32_scale_twin(out), ids))
    r_self = rel(got, ort_logits(out, ids))
    print(f"{variant}: 1bit (act float) vs onnxruntime on the float32-scale twin rel {r_twin:.3e} (tol {tol:g}); "
          f"vs the float16 graph itself rel {r_self:.3e} (tol {F16_TOL:g}: its DequantizeLinear rounds weights to float16)")
    assert r_twin <= tol, f"vs the float32-scale twin: rel {r_twin:.3e} > tol {tol:g}"
    assert r_self <= F16_TOL, f"vs the float16 graph: rel {r_self:.3e} > {F16_TOL:g}"


@pytest.mark.parametrize("variant", list(NBITS))
def test_nbits(variant, onebit, model, ids, work, pytestconfig):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(onnx.load(str(model)), bits=4, block_size=32, is_symmetric=NBITS[variant])
    q.process()
    out = work / f"{variant}.onnx"
    q.model.save_model_to_file(str(out), use_external_data_format=False)
    counts = op_counts(out)
    n = counts.get("com.microsoft::MatMulNBits", 0)
    print(f"{variant}: {n} MatMulNBits, {counts.get('MatMul', 0)} MatMul left")
    assert n > 0, f"{variant}: the quantizer wrote no MatMulNBits"
    check_against_ort(variant, onebit, out, ids, pytestconfig.getoption("tol"))
