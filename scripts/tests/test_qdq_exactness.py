"""Exactness of 1bit's fused QDQ group (A8W8 QDQ: int8 activations and int8
weights in QuantizeLinear/DequantizeLinear pairs) against onnxruntime's CPU
EP, element by element.

Each case is a small opset-21 graph (DESIGN.md, "Fused A8W8 group"):

    x_q [M,K] --DequantizeLinear(s_x, zp_x)--+
                                             +--> MatMul --> QuantizeLinear(s_y, zp_y) --> y_q [M,N] int8
    w_q [K,N] --DequantizeLinear(s_w, zp_w)--+    (w_q, scales, zero points: initializers)

run four ways on the same seeded data:

  ort         onnxruntime, CPU EP, ORT_DISABLE_ALL, one thread: the reference
              arithmetic of "DQ -> float32 MatMul (MLAS) -> Q", node by node
  ort-default onnxruntime with its default ORT_ENABLE_ALL, counted against
              `ort`, reported, never gated. On the standalone group (int8 in,
              int8 out) onnxruntime 1.32 rewrites nothing; so the case is also
              run inside a float Q -> [group] -> DQ chain, as in an exported
              model, where it does rewrite (s8->u8, QLinearMatMul, an integer
              path) and is compared with `ort` and with exact rounding
  fused       `1bit run` (the QDQ fusion on: one com.onebit::QDQMatMul node)
  control     `ONEBIT_QDQ=0 1bit run`: DQ, float MatMul and Q as separate nodes

fused and control are compared with `ort` int8 element by element: worst |d|
in LSB and the number of differing elements. Every differing element is
printed with (m, n), the exact integer accumulator (int64, from x_q, w_q and
the zero points), the exact real value acc*s_x*s_w/s_y (fractions from the
float32 scales), onnxruntime's own float32 value y/s_y (taken from the same
graph without the Q, run the same way, so it is ORT's actual MatMul output),
numpy's float32 reproduction (dequantize, np.matmul; its summation order is
not MLAS's), each side's int8 and a verdict. A difference is *explained* only
if it is 1 LSB, each side's int8 is round-half-to-even of its own value
(fused: the exact value; control: 1bit's float32 from the Q-less graph; ort:
ORT's float32), and either
  tie       one of those values is exactly the rounding boundary k+1/2
            between the two results (DESIGN.md's case), or
  crossing  the boundary lies between the values and each float32 value is
            within the a-priori float32 error bound of the exact value,
            gamma_{K+3} * sum_k |x_dq*w_dq| / s_y (any summation order):
            ORT's accumulation error carried it across k+1/2 without landing
            on it. --ties-only counts a crossing as unexplained, DESIGN.md's
            literal wording.
Anything else fails the test.

Each fused run is also checked against the fusion report that
ONEBIT_QDQ_DEBUG=1 prints (qdq_fused groups=1 with_q=1, or for the refusal
case `qdq_refused why=activation_scale_along_k` and groups=0).

test_memory runs 256x1024x1024 fused and with ONEBIT_QDQ=0, each as its own
child of /usr/bin/time, which reports its peak RSS; a baseline graph with the
same input, the same int8 weight initializer and an output of the same size
(y_q = Identity(x_q)) is subtracted, so the numbers are the group's own
growth. The control allocates x_dq (1 MiB) + w_dq (4 MiB) + y (1 MiB) of
float32; the fused run must stay below 4 MiB of growth (it may not hold even
w_dq) and at least 4 MiB below the control.

A 1bit without the fused kernel (`ops 1bit does not implement:
com.onebit::QDQMatMul`) skips the fused runs, or fails them with
--require-fused (as ctest runs it).

One test per case and run, by group (tests/qdq_tests.cmake runs one group per
ctest test):
  test_small[CASE-fused|control]   8x16x6: proof graph, exact ties, per-axis
        scales, asymmetric and per-axis zero points, uint8 activations,
        com.microsoft Q/DQ, and the scale-along-K graph that must not fuse
  test_large[large-...]            256x1024x1024
  test_proj[CASE-...]              the five Qwen3-0.6B projection shapes at 5 and 32 rows
  test_memory[...]                 peak RSS growth, fused vs ONEBIT_QDQ=0

  pytest scripts/tests/test_qdq_exactness.py --collect-only -qq           # the cases
  pytest scripts/tests/test_qdq_exactness.py::test_small --onebit build/1bit --require-fused
  pytest scripts/tests/test_qdq_exactness.py -k "proof or asym" --onebit build/1bit
  pytest scripts/tests/test_qdq_exactness.py::test_memory --onebit build/1bit --memory-repeats 5
  ... --work DIR keeps the graphs and outputs; -vv prints every differing element, even past 20.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onebit_tools import cli
from onebit_tools.ort import session

MISSING_KERNEL = "does not implement:"
NP_TYPE = {"int8": np.int8, "uint8": np.uint8}
ONNX_TYPE = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
MIB = 1 << 20


@dataclass
class Case:
    name: str
    group: str
    m: int
    k: int
    n: int
    doc: str
    x_scale: str = "tensor"  # tensor | row (axis 0) | k (axis 1: along K, must be refused)
    w_scale: str = "tensor"  # tensor | column (axis 1)
    x_zp: str = "zero"  # zero | tensor | row
    w_zp: str = "zero"  # zero | tensor | column
    zp_values: dict = field(default_factory=dict)  # fixed zero points: {"x": -40, "w": -25}
    y_zp: int = 0
    x_type: str = "int8"
    domain: str = ""  # "" (ai.onnx) or "com.microsoft"
    ties: bool = False  # power-of-two scales and small integers: exact arithmetic, half the outputs on a tie
    refused: str = ""  # expected refusal reason; empty: must fuse
    seed: int = 0


PROJECTIONS = {  # Qwen3-0.6B: name -> (K, N)
    "q": (1024, 2048), "kv": (1024, 1024), "o": (2048, 1024), "gate_up": (1024, 3072), "down": (3072, 1024),
}  # fmt: skip


def all_cases() -> list[Case]:
    cases = [
        Case("proof", "small", 8, 16, 6, "the reference note's proof graph: per tensor, symmetric int8"),
        Case("per_tensor", "small", 8, 16, 6,
             "per tensor, power-of-two scales: every float op exact, half the outputs exact ties (rounding rule)",
             ties=True, seed=1),
        Case("per_axis", "small", 8, 16, 6, "8 row scales on x (axis 0), 6 column scales on w (axis 1)",
             x_scale="row", w_scale="column", seed=2),
        Case("asym", "small", 8, 16, 6, "asymmetric per tensor: zp_x=-40, zp_w=-25, zp_y=-7",
             x_zp="tensor", w_zp="tensor", zp_values={"x": -40, "w": -25}, y_zp=-7, seed=3),
        Case("per_axis_zp", "small", 8, 16, 6, "8 row scales + zero points, 6 column scales + zero points, zp_y",
             x_scale="row", w_scale="column", x_zp="row", w_zp="column", y_zp=-7, seed=4),
        Case("uint8", "small", 8, 16, 6, "uint8 activations (zp_x=131), int8 weights, per-column scales",
             x_type="uint8", x_zp="tensor", zp_values={"x": 131}, w_scale="column", seed=5),
        Case("ms_domain", "small", 8, 16, 6, "the proof graph with Q/DQ in the com.microsoft domain (same operator to 1bit)",
             domain="com.microsoft", seed=6),
        Case("k_axis", "small", 8, 16, 6, "x scale along K (axis 1): must NOT fuse, same output as ORT",
             x_scale="k", refused="activation_scale_along_k", seed=7),
        Case("large", "large", 256, 1024, 1024, "256x1024x1024 per tensor", seed=8),
    ]
    for i, (name, (k, n)) in enumerate(PROJECTIONS.items()):
        for rows in (5, 32):
            cases.append(Case(f"{name}{rows}", "proj", rows, k, n,
                              f"Qwen3-0.6B {name}_proj {k}->{n} at {rows} rows: per-tensor x, per-column w (Quark's form)",
                              w_scale="column", seed=20 + 2 * i + (rows == 32)))
    return cases


# --------------------------------------------------------------------------
# Data and graphs
# --------------------------------------------------------------------------


@dataclass
class Data:
    x_q: np.ndarray  # [M, K] int8/uint8
    w_q: np.ndarray  # [K, N] int8
    s_x: np.ndarray  # float32: [] | [M] | [K]
    s_w: np.ndarray  # float32: [] | [N]
    zp_x: np.ndarray | None  # same shape as s_x, x's dtype
    zp_w: np.ndarray | None
    s_y: np.float32
    zp_y: np.int8


def make_data(c: Case) -> Data:
    rng = np.random.default_rng(c.seed)
    lo, hi = (0, 255) if c.x_type == "uint8" else (-128, 127)
    shape_of = {"tensor": (), "row": (c.m,), "k": (c.k,), "column": (c.n,)}

    def zero_points(kind: str, scale_kind: str, fixed, dtype, spread):
        if kind == "zero":
            return None if dtype == np.int8 else np.full(shape_of[scale_kind], 128, dtype)
        shape = shape_of["tensor" if kind == "tensor" else scale_kind]
        if fixed is not None:
            return np.full(shape, fixed, dtype)
        return rng.integers(-spread, spread + 1, size=shape).astype(dtype)

    if c.ties:
        x_q = rng.integers(-3, 4, size=(c.m, c.k)).astype(np.int8)
        w_q = rng.integers(-3, 4, size=(c.k, c.n)).astype(np.int8)
        # s_x*s_w/s_y = 1/2: y/s_y = acc/2, a tie for every odd accumulator.
        return Data(x_q, w_q, np.float32(2**-3), np.float32(2**-3), None, None, np.float32(2**-5), np.int8(c.y_zp))

    zp_x = zero_points(c.x_zp, c.x_scale, c.zp_values.get("x"), NP_TYPE[c.x_type], 20)
    zp_w = zero_points(c.w_zp, c.w_scale, c.zp_values.get("w"), np.int8, 20)
    # Activations: normal with a few outliers, as a calibrated LLM activation
    # looks; weights: normal, |w| <= 127.
    x = rng.normal(0, 30, size=(c.m, c.k))
    x[rng.random((c.m, c.k)) < 0.01] *= 3
    # zero points along rows broadcast down a column; along K or per tensor they broadcast as is
    rowwise = zp_x is not None and (c.x_zp == "row" or (c.x_scale == "row" and zp_x.ndim))
    center = 0 if zp_x is None else zp_x.reshape(-1, 1) if rowwise else zp_x
    x_q = np.clip(np.rint(x) + center, lo, hi).astype(NP_TYPE[c.x_type])
    w_center = 0 if zp_w is None else zp_w
    w_q = np.clip(np.rint(rng.normal(0, 35, size=(c.k, c.n))) + w_center, -127, 127).astype(np.int8)
    s_x = rng.uniform(0.01, 0.05, size=shape_of[c.x_scale]).astype(np.float32)
    s_w = rng.uniform(0.002, 0.008, size=shape_of[c.w_scale]).astype(np.float32)
    d = Data(x_q, w_q, s_x, s_w, zp_x, zp_w, np.float32(1), np.int8(c.y_zp))
    # Output scale from the real outputs (as calibration would): max|y| -> ~120 LSB.
    y = exact_float(c, d)
    d.s_y = np.float32(np.abs(y).max() / 120.0)
    return d


def _axis_of(kind: str) -> int | None:
    return {"row": 0, "k": 1, "column": 1}.get(kind)


def build_graph(c: Case, d: Data, with_q: bool = True, baseline: bool = False) -> onnx.ModelProto:
    """The case's graph; with_q=False stops at the float MatMul output; baseline: y_q = Identity(x_q)."""
    x_t = ONNX_TYPE[c.x_type]
    inits = [numpy_helper.from_array(d.w_q, "w_q")]
    if baseline:
        # Same input, same int8 initializer (read by Shape so it is loaded), an int8 output of M x K.
        nodes = [helper.make_node("Identity", ["x_q"], ["y_q"]), helper.make_node("Shape", ["w_q"], ["w_shape"])]
        outs = [helper.make_tensor_value_info("y_q", x_t, [c.m, c.k]),
                helper.make_tensor_value_info("w_shape", TensorProto.INT64, [2])]
        g = helper.make_graph(nodes, "baseline", [helper.make_tensor_value_info("x_q", x_t, [c.m, c.k])], outs, inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)

    def dq(name, data, scale, zp, kind):
        inits.append(numpy_helper.from_array(np.asarray(scale, np.float32), f"{name}_scale"))
        ins = [data, f"{name}_scale"]
        if zp is not None:
            inits.append(numpy_helper.from_array(np.asarray(zp), f"{name}_zp"))
            ins.append(f"{name}_zp")
        axis = _axis_of(kind)
        attrs = {"axis": axis} if axis is not None else {}
        return helper.make_node("DequantizeLinear", ins, [f"{name}_dq"], domain=c.domain, **attrs)

    nodes = [dq("x", "x_q", d.s_x, d.zp_x, c.x_scale), dq("w", "w_q", d.s_w, d.zp_w, c.w_scale),
             helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [c.m, c.n])]
    if with_q:
        inits += [numpy_helper.from_array(np.asarray(d.s_y, np.float32), "y_scale"),
                  numpy_helper.from_array(np.asarray(d.zp_y, np.int8), "y_zp")]
        nodes.append(helper.make_node("QuantizeLinear", ["y", "y_scale", "y_zp"], ["y_q"], domain=c.domain))
        outs = [helper.make_tensor_value_info("y_q", TensorProto.INT8, [c.m, c.n])]
    g = helper.make_graph(nodes, c.name, [helper.make_tensor_value_info("x_q", x_t, [c.m, c.k])], outs, inits)
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(c.domain, 1)] if c.domain else [])
    model = helper.make_model(g, opset_imports=opsets, ir_version=10)
    onnx.checker.check_model(model)
    return model


# --------------------------------------------------------------------------
# Exact arithmetic
# --------------------------------------------------------------------------


def _col(v, kind_is_rowwise: bool):
    return v.reshape(-1, 1) if kind_is_rowwise and np.ndim(v) else v


def centered(c: Case, d: Data) -> tuple[np.ndarray, np.ndarray]:
    """x_q - zp_x and w_q - zp_w as int64 (zero points broadcast along their axes)."""
    x = d.x_q.astype(np.int64)
    if d.zp_x is not None:
        x = x - _col(d.zp_x.astype(np.int64), c.x_scale == "row" or c.x_zp == "row")
    w = d.w_q.astype(np.int64)
    if d.zp_w is not None:
        w = w - d.zp_w.astype(np.int64)  # per column broadcasts along the last axis
    return x, w


def exact_acc(c: Case, d: Data) -> np.ndarray:
    """acc[m][n] = sum_k (x_q - zx)(w_q - zw), exact int64 (only defined without a scale along K)."""
    x, w = centered(c, d)
    return x @ w


def exact_float(c: Case, d: Data) -> np.ndarray:
    """The real-valued MatMul output in float64 (for choosing s_y and for the K-axis case)."""
    x, w = centered(c, d)
    sx = d.s_x.astype(np.float64)
    xs = x * (sx.reshape(-1, 1) if c.x_scale == "row" else sx)
    return xs @ (w * d.s_w.astype(np.float64))


def exact_value(c: Case, d: Data, acc: np.ndarray, m: int, n: int) -> Fraction:
    """acc * s_x * s_w / s_y as an exact fraction of the float32 scale values."""
    sx = Fraction(float(d.s_x[m] if c.x_scale == "row" else d.s_x))
    sw = Fraction(float(d.s_w[n] if c.w_scale == "column" else d.s_w))
    return Fraction(int(acc[m, n])) * sx * sw / Fraction(float(d.s_y))


def saturate(v: int) -> int:
    return max(-128, min(127, v))


def exact_q(c: Case, d: Data, acc: np.ndarray) -> np.ndarray:
    """saturate(round_half_to_even(acc*s_x*s_w/s_y) + zp_y), exact: float64 first, fractions near ties."""
    sx = d.s_x.astype(np.float64)
    sx = sx.reshape(-1, 1) if c.x_scale == "row" else sx
    v = acc * sx * d.s_w.astype(np.float64) / np.float64(d.s_y)
    q = np.rint(v)
    near = np.abs(np.abs(v - np.floor(v)) - 0.5) < 1e-6
    for m, n in zip(*np.nonzero(near)):
        q[m, n] = round(exact_value(c, d, acc, m, n))  # Fraction.__round__ is round-half-to-even
    return np.clip(q + int(d.zp_y), -128, 127).astype(np.int8)


def numpy_float32(c: Case, d: Data) -> np.ndarray:
    """DQ -> float32 matmul -> /s_y in numpy float32 (np.matmul's order, not MLAS's)."""
    x = d.x_q.astype(np.int32)
    if d.zp_x is not None:
        x = x - _col(d.zp_x.astype(np.int32), c.x_scale == "row" or c.x_zp == "row")
    sx = d.s_x.reshape(-1, 1) if c.x_scale == "row" else d.s_x
    w = d.w_q.astype(np.int32) - (d.zp_w.astype(np.int32) if d.zp_w is not None else 0)
    y = (x.astype(np.float32) * sx) @ (w.astype(np.float32) * d.s_w)
    return y.astype(np.float32) / d.s_y


# --------------------------------------------------------------------------
# Runners
# --------------------------------------------------------------------------


def wrapped_graph(c: Case, d: Data) -> onnx.ModelProto:
    """The case's graph between a float input and a float output: x -> Q -> [group] -> DQ -> y.

    The standalone group (int8 in, int8 out) is left alone by ORT_ENABLE_ALL;
    inside a Q -> DQ chain, as in a real export, ORT rewrites it (its s8->u8
    conversion, then QLinearMatMul). Fed x = (x_q - zp_x) * s_x in float32 it
    quantizes back to x_q exactly, and y_q is read back as rint(y/s_y) + zp_y,
    so its int8 can be compared with the reference's.
    """
    m = build_graph(c, d)
    g = m.graph
    q_inputs = ["x_f", "x_scale", "x_zp"]
    if d.zp_x is None:  # Q's output type comes from its zero point: give it an int8 zero
        g.initializer.append(numpy_helper.from_array(np.zeros(np.shape(d.s_x), NP_TYPE[c.x_type]), "x_q_zp"))
        q_inputs[2] = "x_q_zp"
    g.node.insert(0, helper.make_node("QuantizeLinear", q_inputs, ["x_q"], domain=c.domain,
                                      **({"axis": _axis_of(c.x_scale)} if _axis_of(c.x_scale) is not None else {})))
    g.node.append(helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zp"], ["y_f"], domain=c.domain))
    del g.input[:], g.output[:]
    g.input.append(helper.make_tensor_value_info("x_f", TensorProto.FLOAT, [c.m, c.k]))
    g.output.append(helper.make_tensor_value_info("y_f", TensorProto.FLOAT, [c.m, c.n]))
    return m


def x_float(c: Case, d: Data) -> np.ndarray:
    x, _ = centered(c, d)
    sx = d.s_x.reshape(-1, 1) if c.x_scale == "row" else d.s_x
    return (x.astype(np.float32) * sx).astype(np.float32)




def run_ort(path: Path, x_q: np.ndarray, level: str, input_name: str = "x_q") -> tuple[np.ndarray, str]:
    """ORT's output at this optimization level ("disable" or "all"), and the ops its optimized graph runs."""
    optimized = path.with_name(f"{path.stem}-{level}.onnx")
    sess = session(path, opt=level, threads=1, quiet=True, optimized_path=optimized)
    out = sess.run(None, {input_name: x_q})[0]
    ops = " + ".join(f"{n.domain + '::' if n.domain else ''}{n.op_type}" for n in onnx.load(str(optimized)).graph.node)
    return out, ops


@dataclass
class OneBitRun:
    out: np.ndarray | None
    stderr: str
    missing_kernel: bool = False


def run_onebit(onebit: str, model: Path, x_q: np.ndarray, env_extra: dict[str, str]) -> OneBitRun:
    r = cli.run(onebit, model, {"x_q": x_q}, env={"ONEBIT_QDQ_DEBUG": "1", **env_extra}, check=False)
    if r.returncode != 0:
        if not (MISSING_KERNEL in r.stderr and "QDQMatMul" in r.stderr):
            raise RuntimeError(f"1bit run {model} failed ({r.returncode}):\n{r.stderr}{r.stdout}")
        return OneBitRun(None, r.stderr, missing_kernel=True)
    return OneBitRun(r.outputs["y_q"] if "y_q" in r.outputs else next(iter(r.outputs.values())), r.stderr)


def measure_rss_kb(onebit: str, model: Path, x_path: Path, out_dir: Path, env_extra: dict[str, str]) -> tuple[int, str]:
    """Peak RSS (kB) of one `1bit run`, as /usr/bin/time reports it for its child.

    Not wait4() on a child of this process: ru_maxrss keeps the high-water
    mark of the memory a child had before exec, and a child forked from this
    Python (numpy + onnxruntime, ~100 MB) would report that instead of 1bit's
    own peak. /usr/bin/time is a small process, so its child's maximum is 1bit's.
    """
    out_dir.mkdir(exist_ok=True)
    rss_file = out_dir / "maxrss.txt"
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), onebit, "run", str(model),
                        "--input", f"x_q={x_path}", "-o", str(out_dir)],
                       env=dict(os.environ, **env_extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        return -1, p.stderr
    return int(rss_file.read_text().split()[-1]), p.stderr


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------


def is_tie(v) -> bool:
    return v - math.floor(v) == Fraction(1, 2) if isinstance(v, Fraction) else float(v) % 1.0 == 0.5


def rhe_q(v, zp: int) -> int:
    """saturate(round_half_to_even(v) + zp) for a Fraction or a float."""
    r = round(v) if isinstance(v, Fraction) else int(np.rint(np.float32(v)))
    return saturate(r + zp)


def real_value(c: Case, d: Data, acc: np.ndarray | None, m: int, n: int) -> Fraction:
    """y[m][n]/s_y exactly: acc*s_x*s_w/s_y, or with a scale along K the exact sum of the products."""
    if acc is not None:
        return exact_value(c, d, acc, m, n)
    x, w = centered(c, d)
    sx = [Fraction(float(v)) for v in np.broadcast_to(d.s_x, (c.k,))]
    sw = Fraction(float(d.s_w[n] if c.w_scale == "column" else d.s_w))
    return sum(Fraction(int(x[m, k]) * int(w[k, n])) * sx[k] for k in range(c.k)) * sw / Fraction(float(d.s_y))


def float32_bound(c: Case, d: Data, m: int, n: int) -> float:
    """A-priori bound on |float32 result - exact| for y/s_y at (m, n), any summation order.

    Each x_dq and w_dq is one rounded product, each x_dq*w_dq one more, the
    K-term sum (any order, blocked or not) adds at most gamma_{K-1}, the final
    /s_y one more: |error| <= gamma_{K+3} * sum_k |x_dq*w_dq| / s_y with
    gamma_j = j*u/(1 - j*u), u = 2^-24 (Higham, Accuracy and Stability of
    Numerical Algorithms, 2nd ed., sec. 3.1).
    """
    x, w = centered(c, d)
    sx = np.broadcast_to(d.s_x.reshape(-1, 1) if c.x_scale == "row" else d.s_x, x.shape)[m].astype(np.float64)
    sw = float(d.s_w[n] if c.w_scale == "column" else d.s_w)
    terms = np.abs(x[m].astype(np.float64) * sx * w[:, n].astype(np.float64) * sw).sum() / float(d.s_y)
    u, j = 2.0**-24, c.k + 3
    return j * u / (1 - j * u) * terms


@dataclass
class Verdict:
    worst: int
    differing: int
    ties: int
    crossings: int
    unexplained: int
    lines: list[str]


def compare(c: Case, d: Data, side: str, got: np.ndarray, ref: np.ndarray, acc: np.ndarray | None,
            ort_f: np.ndarray, own_f: np.ndarray | None, np_f: np.ndarray, ties_only: bool) -> Verdict:
    """Element by element: `got` (1bit) against `ref` (ORT int8, ORT_DISABLE_ALL).

    side "fused": 1bit's value is the exact one (integer accumulator, one rounding);
    side "control": 1bit's value is its own float32 (own_f, from the Q-less graph).
    A differing element is explained when it is 1 LSB, each side's int8 is
    round-half-to-even of its own value, and either
      tie:      one of the values is exactly a rounding tie k+1/2, or
      crossing: the boundary k+1/2 lies between the two values and every
                float32 value is within float32_bound() of the exact value
                (ORT's accumulation error carried it across the boundary).
    With ties_only, a crossing counts as unexplained (DESIGN.md's literal wording).
    """
    diff = got.astype(np.int32) - ref.astype(np.int32)
    zp = int(d.zp_y)
    v_ties = v_cross = unexplained = 0
    lines = []
    for m, n in zip(*np.nonzero(diff)):
        m, n = int(m), int(n)
        exact = real_value(c, d, acc, m, n)
        of = np.float32(ort_f[m, n])
        own = exact if side == "fused" else np.float32(own_f[m, n])
        bound = float32_bound(c, d, m, n)
        ort_ok, own_ok = rhe_q(of, zp) == int(ref[m, n]), rhe_q(own, zp) == int(got[m, n])
        lo_q, hi_q = sorted((int(ref[m, n]), int(got[m, n])))
        boundary = Fraction(lo_q - zp) + Fraction(1, 2)  # between the two results, in y/s_y units
        floats = [("ORT", of)] + ([("1bit", own)] if side == "control" else [])
        within = all(abs(Fraction(float(f)) - exact) <= Fraction(bound) for _, f in floats)
        values = [Fraction(float(of)), exact] + ([Fraction(float(own))] if side == "control" else [])
        straddle = min(values) <= boundary <= max(values)
        on_tie = [name for name, val in (("ORT float32", Fraction(float(of))), ("exact value", exact),
                                         ("1bit float32", Fraction(float(own)) if side == "control" else None))
                  if val is not None and val == boundary]
        if abs(int(diff[m, n])) != 1:
            verdict = "UNEXPLAINED: more than 1 LSB"
        elif not (ort_ok and own_ok):
            verdict = f"UNEXPLAINED: {'ORT' if not ort_ok else '1bit'} int8 is not round-half-even of its own value"
        elif on_tie:
            verdict = f"explained (tie): {' and '.join(on_tie)} exactly on {float(boundary)}; each side rounds its own value"
            v_ties += 1
        elif straddle and within and not ties_only:
            verdict = (f"explained (crossing): {float(boundary)} lies between the values, each float32 within "
                       f"its error bound {bound:.2e} of the exact value")
            v_cross += 1
        else:
            verdict = "UNEXPLAINED: no value on the tie" + ("" if straddle and within else
                                                              f" and the float32 error exceeds its bound {bound:.2e}")
        unexplained += verdict.startswith("UNEXPLAINED")
        acc_s = f"acc={int(acc[m, n])}" if acc is not None else "acc=n/a (scale along K)"
        own_s = f" 1bit_f32={float(own):.9f}" if side == "control" else ""
        lines.append(f"    ({m},{n}) {acc_s} exact={float(exact):.9f} (|exact-boundary| {float(abs(exact - boundary)):.2e}) "
                     f"ort_f32={float(of):.9f} numpy_f32={float(np_f[m, n]):.9f}{own_s} "
                     f"1bit={int(got[m, n])} ort={int(ref[m, n])} -> {verdict}")
    worst = int(np.abs(diff).max()) if diff.size else 0
    return Verdict(worst, len(lines), v_ties, v_cross, unexplained, lines)


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------


def expect_report(c: Case, stderr: str, mode: str) -> str | None:
    """None if ONEBIT_QDQ_DEBUG's lines match what this mode must do, else the problem."""
    if mode == "control":
        want = ["qdq_refused why=disabled_by_ONEBIT_QDQ=0 count=1", "qdq_fused groups=0"]
        if c.refused:
            want = [f"qdq_refused why={c.refused} count=1", "qdq_fused groups=0"]
    elif c.refused:
        want = [f"qdq_refused why={c.refused} count=1", "qdq_fused groups=0"]
    else:
        want = ["qdq_fused groups=1 with_q=1 refused=0"]
    missing = [w for w in want if w not in stderr]
    return f"expected {missing} in ONEBIT_QDQ_DEBUG output, got: {stderr.strip()!r}" if missing else None



@dataclass
class Reference:
    """What a case's fused and control runs are held against, computed once per case."""
    d: Data
    q_path: Path
    f_path: Path
    ref: np.ndarray  # ORT int8, ORT_DISABLE_ALL
    ort_f: np.ndarray  # ORT's float32 y/s_y from the Q-less graph
    np_f: np.ndarray
    acc: np.ndarray | None
    exact: np.ndarray | None

    @property
    def shape(self) -> str:
        return f"{self.d.x_q.shape[0]}x{self.d.x_q.shape[1]}x{self.d.w_q.shape[1]}"


_references: dict[str, Reference] = {}
ROWS: list[str] = []


def reference(c: Case, work: Path) -> Reference:
    if c.name in _references:
        return _references[c.name]
    d = make_data(c)
    q_path, f_path = work / f"{c.name}.onnx", work / f"{c.name}-noq.onnx"
    onnx.save(build_graph(c, d), q_path)
    onnx.save(build_graph(c, d, with_q=False), f_path)

    ref, _ = run_ort(q_path, d.x_q, "disable")
    ort_f = (run_ort(f_path, d.x_q, "disable")[0] / d.s_y).astype(np.float32)
    ref_default, default_ops = run_ort(q_path, d.x_q, "all")
    w_path = work / f"{c.name}-wrapped.onnx"
    onnx.save(wrapped_graph(c, d), w_path)
    wrapped = {}
    for level in ("disable", "all"):
        y_f, ops = run_ort(w_path, x_float(c, d), level, "x_f")
        wrapped[level] = (np.clip(np.rint(y_f / d.s_y) + int(d.zp_y), -128, 127).astype(np.int8), ops)
    x_back = int(np.count_nonzero(wrapped["disable"][0] != ref))
    np_f = numpy_float32(c, d)
    acc = exact_acc(c, d) if c.x_scale != "k" else None
    exact = exact_q(c, d, acc) if acc is not None else None
    shape = f"{c.m}x{c.k}x{c.n}"
    # Sanity: ORT's int8 is Q of ORT's own float32 (else the explanation below explains nothing).
    ort_self = int(np.count_nonzero(np.clip(np.rint(ort_f) + int(d.zp_y), -128, 127).astype(np.int8) != ref))
    n_default = int(np.count_nonzero(ref_default != ref))
    n_exact_ort = int(np.count_nonzero(exact != ref)) if exact is not None else -1
    ties = None  # counted where it is cheap
    if acc is not None and ref.size <= 4096:
        ties = sum(is_tie(exact_value(c, d, acc, m, n)) for m in range(c.m) for n in range(c.n))
    print(f"== {c.name} ({shape}, {ref.size} outputs): {c.doc}")
    n_wrapped = int(np.count_nonzero(wrapped["all"][0] != ref))
    w_exact = int(np.count_nonzero(wrapped["all"][0] != exact)) if exact is not None else -1
    print(f"   ORT_ENABLE_ALL inside Q->DQ (a model's context) runs {wrapped['all'][1]}: "
          f"{n_wrapped} differ from the reference" + (f", {w_exact} from exact rounding" if exact is not None else "")
          + (f" (wrapper itself off by {x_back})" if x_back else ""))
    print(f"   ORT_ENABLE_ALL runs {default_ops}: {n_default} differ from ORT_DISABLE_ALL; "
          f"ORT int8 vs Q(ORT float32): {ort_self} differ; "
          + (f"ORT vs exact rounding: {n_exact_ort} differ" if exact is not None else "no exact integer form (scale along K)")
          + (f"; exact ties: {ties}" if ties is not None else ""))
    _references[c.name] = Reference(d, q_path, f_path, ref, ort_f, np_f, acc, exact)
    return _references[c.name]


def check_case(c: Case, mode: str, onebit: str, work: Path, config) -> None:
    """One run (fused or control) of case c against onnxruntime; fails on anything unexplained."""
    r0 = reference(c, work)
    d, ref = r0.d, r0.ref
    env = {} if mode == "fused" else {"ONEBIT_QDQ": "0"}
    r = run_onebit(onebit, r0.q_path, d.x_q, env)
    if r.missing_kernel:
        msg = "1bit: ops 1bit does not implement: com.onebit::QDQMatMul (the fused kernel is not built)"
        if config.getoption("require_fused"):
            pytest.fail(msg + " -- --require-fused")
        pytest.skip(msg)
    problem = expect_report(c, r.stderr, mode)
    own_f = None
    if mode == "control" or c.refused:
        fr = run_onebit(onebit, r0.f_path, d.x_q, env)
        own_f = (fr.out / d.s_y).astype(np.float32)
    side = "fused" if mode == "fused" and not c.refused else "control"
    v = compare(c, d, side, r.out, ref, r0.acc, r0.ort_f, own_f, r0.np_f, config.getoption("ties_only"))
    n_exact = int(np.count_nonzero(r.out != r0.exact)) if r0.exact is not None else -1
    note = problem or (f"vs exact rounding: {n_exact} differ" if r0.exact is not None else "refused, node by node")
    explained = f"{v.ties} tie, {v.crossings} crossing" + (f", {v.unexplained} UNEXPLAINED" if v.unexplained else "")
    print(f"   {mode:7s}: worst |d| {v.worst} LSB, {v.differing} of {ref.size} differ ({explained}); {note}")
    verbose = config.get_verbosity() >= 2
    for line in v.lines if (verbose or v.unexplained or len(v.lines) <= 20) else v.lines[:20]:
        print(line)
    ROWS.append(f"| {c.name} | {r0.shape} | {ref.size} | {mode} | {v.worst} | {v.differing} | "
                f"{explained if v.differing else '-'} | {note} |")
    assert problem is None, problem
    assert v.unexplained == 0, f"{v.unexplained} of {v.differing} differing elements unexplained (printed above)"


@pytest.fixture(scope="module", autouse=True)
def table():
    """The markdown table of every run, printed after the module's last test."""
    yield
    if ROWS:
        print("\n| case | M×K×N | elements | run | worst \\|d\\| LSB | differing | explained as | note |")
        print("|---|---|---:|---|---:|---:|---:|---|")
        print("\n".join(ROWS))


def runs_of(group: str) -> list:
    return [pytest.param(c, mode, id=f"{c.name}-{mode}") for c in all_cases() if c.group == group
            for mode in ("fused", "control")]


@pytest.mark.parametrize("case,mode", runs_of("small"))
def test_small(case, mode, onebit, work, pytestconfig):
    check_case(case, mode, onebit, work, pytestconfig)


@pytest.mark.parametrize("case,mode", runs_of("large"))
def test_large(case, mode, onebit, work, pytestconfig):
    check_case(case, mode, onebit, work, pytestconfig)


@pytest.mark.parametrize("case,mode", runs_of("proj"))
def test_proj(case, mode, onebit, work, pytestconfig):
    check_case(case, mode, onebit, work, pytestconfig)


@pytest.fixture(scope="module")
def memory(onebit, work, pytestconfig) -> dict:
    """Peak RSS growth (kB) over the baseline graph of the fused and the ONEBIT_QDQ=0 run, 256x1024x1024."""
    repeats = pytestconfig.getoption("memory_repeats")
    c = next(c for c in all_cases() if c.name == "large")
    d = make_data(c)
    paths = {"fused": work / "mem.onnx", "baseline": work / "mem-base.onnx"}
    onnx.save(build_graph(c, d), paths["fused"])
    onnx.save(build_graph(c, d, baseline=True), paths["baseline"])
    x_path = work / "mem-x.npy"
    np.save(x_path, d.x_q)
    runs = {"baseline": (paths["baseline"], {}), "fused": (paths["fused"], {}),
            "control": (paths["fused"], {"ONEBIT_QDQ": "0"})}
    peak: dict[str, list[int]] = {k: [] for k in runs}
    for _ in range(repeats):  # interleaved, so a drifting machine moves all three alike
        for name, (model, env) in list(runs.items()):
            kb, err = measure_rss_kb(onebit, model, x_path, work / f"mem-out-{name}", env)
            if kb < 0:
                if name == "fused" and MISSING_KERNEL in err:
                    del runs["fused"], peak["fused"]
                    continue
                raise RuntimeError(f"1bit run ({name}) failed:\n{err}")
            peak[name].append(kb)
    med = {k: int(np.median(v)) for k, v in peak.items() if v}
    print(f"== memory (256x1024x1024, peak RSS of `1bit run`, median of {repeats}, kB): "
          + ", ".join(f"{k} {med[k]} {sorted(peak[k])}" for k in med))
    growth = {k: med[k] - med["baseline"] for k in med if k != "baseline"}
    dq_bytes = (c.m * c.k + c.k * c.n + c.m * c.n) * 4
    print("   growth over baseline: " + ", ".join(f"{k} {v} kB ({v / 1024:.2f} MiB)" for k, v in growth.items())
          + f"; float x_dq + w_dq + y = {dq_bytes // 1024} kB")
    return growth


@pytest.mark.parametrize("check", ["control_holds_dequantized", "fused_holds_none"])
def test_memory(check, memory, pytestconfig):
    # Without the control's growth the measurement does not see the tensors, and the fused number means nothing.
    assert "control" in memory and memory["control"] >= 4 * 1024, (
        f"the control grew {memory.get('control')} kB, less than w_dq alone (4 MiB): "
        "the measurement does not see the tensors")
    if check == "control_holds_dequantized":
        return
    if "fused" not in memory:
        msg = "fused: unavailable (the fused kernel com.onebit::QDQMatMul is not built)"
        if pytestconfig.getoption("require_fused"):
            pytest.fail(msg + " -- --require-fused")
        pytest.skip(msg)
    fused, control = memory["fused"], memory["control"]
    print(f"   fused saves {control - fused} kB against the control")
    assert fused < 4 * 1024 and control - fused >= 4 * 1024, (
        f"fused growth {fused} kB holds dequantized tensors (limit: < 4096 kB and >= 4096 kB below the control)")
