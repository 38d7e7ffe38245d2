#!/usr/bin/env python3
"""Census of an ONNX graph: the reference that `1bit inspect --json` is checked against.

  python scripts/onnx_census.py model.onnx            # human-readable
  python scripts/onnx_census.py model.onnx --json     # the JSON contract below
  python scripts/onnx_census.py a.onnx b.onnx --ops   # per-op attributes and input dtypes (markdown)

JSON keys (all counts are over the top-level graph; a plain export has no
subgraphs):

  ir_version               model.ir_version
  nodes                    number of nodes
  matmuls                  number of ai.onnx MatMul nodes
  constant_weight_matmuls  MatMuls whose B input is constant: an initializer
                           or Constant node, directly or through a chain of
                           Transpose / Cast / DequantizeLinear / Identity
  opsets                   {domain: version}, "ai.onnx" for the empty domain
  op_counts                {"Op": n} for ai.onnx, {"domain::Op": n} otherwise
  weight_shapes            [[K, N, count], ...] of those constant B inputs as
                           the MatMul sees them (after any Transpose), sorted
  quantized_matmuls        [[op, format, K, N, count], ...] of com.microsoft
                           MatMulNBits ("4-bit block 32": bits, default 4, and
                           block_size) and MatMulBnb4 ("nf4 block 64", quant_type
                           0 = fp4), K and N from the attributes, sorted
  custom_domains           domains imported or used other than ai.onnx and
                           com.microsoft, sorted
  initializers             number of graph initializers
  initializer_bytes        sum of element count x element size (4-bit types
                           packed two per byte), inline or external alike
  inputs / outputs         [{name, dtype, dims}], dtype a numpy name
                           (float32, int64, ...), dims "[batch,sequence,1024]"
                           with "?" for an unknown dimension ("?" alone for
                           an unknown rank)

External data is never read: only the graph proto is loaded.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

import onnx
from onnx import TensorProto, helper

STANDARD_DOMAINS = {"ai.onnx", "com.microsoft"}
# Ops a constant weight may pass through on its way to MatMul's B input.
WEIGHT_PASSTHROUGH = {"Transpose", "Cast", "DequantizeLinear", "Identity"}


def domain_name(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def op_key(node: onnx.NodeProto) -> str:
    d = domain_name(node.domain)
    return node.op_type if d == "ai.onnx" else f"{d}::{node.op_type}"


def dtype_name(elem_type: int) -> str:
    if elem_type == TensorProto.UNDEFINED:
        return "undefined"
    if elem_type == TensorProto.STRING:
        return "str"
    return helper.tensor_dtype_to_np_dtype(elem_type).name


def element_bits(elem_type: int) -> int:
    if elem_type in (TensorProto.INT4, TensorProto.UINT4) or elem_type == getattr(TensorProto, "FLOAT4E2M1", -1):
        return 4
    return 8 * helper.tensor_dtype_to_np_dtype(elem_type).itemsize


def tensor_bytes(t: onnx.TensorProto) -> int:
    n = math.prod(t.dims)
    return (n * element_bits(t.data_type) + 7) // 8


def dims_string(type_proto: onnx.TypeProto) -> str:
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return "?"
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(str(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append("?")
    return "[" + ",".join(dims) + "]"


def io_entry(v: onnx.ValueInfoProto) -> dict:
    return {"name": v.name, "dtype": dtype_name(v.type.tensor_type.elem_type), "dims": dims_string(v.type)}


def constant_shape(graph: onnx.GraphProto, name: str, producers: dict, inits: dict) -> list[int] | None:
    """Shape of `name` as seen by its consumer if it is a constant weight, else None."""
    if name in inits:
        return list(inits[name].dims)
    node = producers.get(name)
    if node is None:
        return None
    if node.op_type == "Constant" and domain_name(node.domain) == "ai.onnx":
        for a in node.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                return list(a.t.dims)
        return None
    if node.op_type not in WEIGHT_PASSTHROUGH or not node.input:
        return None
    shape = constant_shape(graph, node.input[0], producers, inits)
    if shape is None:
        return None
    if node.op_type == "Transpose":
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        perm = perm or list(reversed(range(len(shape))))
        shape = [shape[p] for p in perm]
    return shape


def census(path: str) -> dict:
    model = onnx.load(path, load_external_data=False)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    producers = {out: n for n in g.node for out in n.output}

    opsets = {domain_name(o.domain): o.version for o in model.opset_import}
    used_domains = {domain_name(n.domain) for n in g.node}
    custom = sorted((set(opsets) | used_domains) - STANDARD_DOMAINS)

    matmuls = [n for n in g.node if n.op_type == "MatMul" and domain_name(n.domain) == "ai.onnx"]
    shapes = Counter()
    for n in matmuls:
        s = constant_shape(g, n.input[1], producers, inits) if len(n.input) > 1 else None
        if s is not None and len(s) >= 2:
            shapes[(s[-2], s[-1])] += 1

    quantized = Counter()
    for n in g.node:
        if domain_name(n.domain) != "com.microsoft" or n.op_type not in ("MatMulNBits", "MatMulBnb4"):
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        if n.op_type == "MatMulNBits":
            fmt = f"{a.get('bits', 4)}-bit block {a.get('block_size', 0)}"
        else:
            fmt = f"{'fp4' if a.get('quant_type', -1) == 0 else 'nf4'} block {a.get('block_size', 0)}"
        quantized[(n.op_type, fmt, a.get("K", 0), a.get("N", 0))] += 1

    return {
        "ir_version": model.ir_version,
        "nodes": len(g.node),
        "matmuls": len(matmuls),
        "constant_weight_matmuls": sum(shapes.values()),
        "opsets": dict(sorted(opsets.items())),
        "op_counts": dict(sorted(Counter(op_key(n) for n in g.node).items())),
        "weight_shapes": [[k, n, c] for (k, n), c in sorted(shapes.items())],
        "quantized_matmuls": [[*key, c] for key, c in sorted(quantized.items())],
        "custom_domains": custom,
        "initializers": len(g.initializer),
        "initializer_bytes": sum(tensor_bytes(t) for t in g.initializer),
        "inputs": [io_entry(v) for v in g.input if v.name not in inits],
        "outputs": [io_entry(v) for v in g.output],
    }


def format_census(c: dict) -> str:
    opsets = ", ".join(f"{d} {v}" for d, v in c["opsets"].items())
    lines = [
        f"ir_version         {c['ir_version']}",
        f"opsets             {opsets}",
        f"custom domains     {', '.join(c['custom_domains']) or 'none'}",
        f"nodes              {c['nodes']}",
        f"MatMul             {c['matmuls']} ({c['constant_weight_matmuls']} with a constant weight)",
        f"weight shapes      {len(c['weight_shapes'])} distinct (K x N: count)",
    ]
    lines += [f"  {k:>6} x {n:<7} {cnt}" for k, n, cnt in c["weight_shapes"]]
    lines.append(f"quantized MatMul   {sum(q[-1] for q in c['quantized_matmuls'])} "
                 f"({len(c['quantized_matmuls'])} distinct: op format K x N: count)")
    lines += [f"  {op} {fmt} {k:>6} x {n:<7} {cnt}" for op, fmt, k, n, cnt in c["quantized_matmuls"]]
    lines.append(f"initializers       {c['initializers']} ({c['initializer_bytes']:,} bytes)")
    for kind in ("inputs", "outputs"):
        for v in c[kind]:
            lines.append(f"{kind[:-1]:<18} {v['name']}: {v['dtype']} {v['dims']}")
    lines.append("op counts")
    width = max((len(k) for k in c["op_counts"]), default=0)
    lines += [f"  {k:<{width}} {n}" for k, n in sorted(c["op_counts"].items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Per-op detail: which attributes and input dtypes an interpreter must accept
# --------------------------------------------------------------------------


def _attr_value(a: onnx.AttributeProto) -> str:
    if a.type == onnx.AttributeProto.TENSOR:
        return f"tensor<{dtype_name(a.t.data_type)}>{list(a.t.dims)}"
    if a.type == onnx.AttributeProto.GRAPH:
        return "<graph>"
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        v = v.decode()
    return repr(v)


def _dtype_list(names: list[str]) -> str:
    """"(float32, int64*)", with a run of more than 3 equal entries as "float32 x60"."""
    parts, i = [], 0
    while i < len(names):
        j = i
        while j < len(names) and names[j] == names[i]:
            j += 1
        parts += [f"{names[i]} x{j - i}"] if j - i > 3 else names[i:j]
        i = j
    return "(" + ", ".join(parts) + ")"


def op_details(path: str) -> dict[str, dict]:
    """{op: {"count", "attrs": set of "k=v, ...", "dtypes": set of "(t0, t1*, ...)"}}.

    Input dtypes come from onnx shape inference over the graph proto; "*"
    marks an initializer or Constant input, "-" a skipped optional input.
    """
    model = onnx.load(path, load_external_data=False)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as e:  # inference is a nicety here; types from the exporter remain
        print(f"note: shape inference failed ({e}); using exporter value_info", file=sys.stderr)
    g = model.graph
    types, const = {}, set()
    for v in list(g.input) + list(g.output) + list(g.value_info):
        types[v.name] = dtype_name(v.type.tensor_type.elem_type)
    for t in g.initializer:
        types[t.name] = dtype_name(t.data_type)
        const.add(t.name)
    for n in g.node:
        if n.op_type == "Constant":
            const.add(n.output[0])
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    types[n.output[0]] = dtype_name(a.t.data_type)
    out: dict[str, dict] = defaultdict(lambda: {"count": 0, "attrs": set(), "dtypes": set()})
    for n in g.node:
        d = out[op_key(n)]
        d["count"] += 1
        d["attrs"].add(", ".join(f"{a.name}={_attr_value(a)}" for a in sorted(n.attribute, key=lambda a: a.name)))
        names = [(types.get(i, "?") + ("*" if i in const else "")) if i else "-" for i in n.input]
        d["dtypes"].add(_dtype_list(names))
    return dict(sorted(out.items()))


def format_op_details(details: dict[str, dict[str, dict]]) -> str:
    """Markdown table over one or more graphs: {graph label: op_details(graph)}."""
    labels = list(details)
    ops = sorted({op for d in details.values() for op in d})
    head = "| op | " + " | ".join(labels) + " | attribute sets | input dtypes (* = initializer) |"
    lines = [head, "|---|" + "---:|" * len(labels) + "---|---|"]
    for op in ops:
        entries = [d[op] for d in details.values() if op in d]
        counts = [str(details[g][op]["count"]) if op in details[g] else "-" for g in labels]
        attrs = sorted(set().union(*(e["attrs"] for e in entries)))
        dtypes = sorted(set().union(*(e["dtypes"] for e in entries)))
        attr_cell = "<br>".join(f"`{a}`" if a else "(none)" for a in attrs)
        lines.append(f"| {op} | " + " | ".join(counts) + f" | {attr_cell} | {'<br>'.join(dtypes)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Census of an ONNX graph (ops, MatMul weight shapes, domains, I/O).")
    p.add_argument("model", nargs="+", help="path to a .onnx file (external data is not read); several with --ops")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="print the census as JSON")
    mode.add_argument(
        "--ops", action="store_true", help="per-op attribute sets and input dtypes, one count column per model (markdown)"
    )
    args = p.parse_args(argv)
    if args.ops:
        # column label: "<dir>/<file stem>", e.g. qwen3-0.6b/model-cached
        print(format_op_details({f"{Path(m).parent.name}/{Path(m).stem}": op_details(m) for m in args.model}))
        return 0
    if len(args.model) != 1:
        p.error("one model at a time, except with --ops")
    c = census(args.model[0])
    print(json.dumps(c, indent=2) if args.json else format_census(c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
