#!/usr/bin/env python3
"""A float32 ONNX graph with its MatMul weights stored as float16: each 2-D
float32 initializer that is a MatMul's B becomes a float16 initializer and a
Cast(to float) node in front of the MatMul, the "float16 weights, float32
compute" form (half the weight bytes on disk and, in 1bit, in memory and per
decode step: graph/passes/f16_weight_matmul.cpp). Everything else is left as
it is, so onnxruntime runs the result too.

  f16_weights.py IN.onnx -o OUT.onnx     # the side files are not copied
"""
import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper


def convert(model: onnx.ModelProto) -> int:
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    weights = {}
    for n in g.node:
        if n.op_type == "MatMul" and n.domain in ("", "ai.onnx") and len(n.input) == 2 and n.input[1] in inits:
            t = inits[n.input[1]]
            if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2:
                weights[n.input[1]] = t
    # A tied LM head reads the embedding through a Transpose: store the
    # transposed weight itself as float16 (the Gather keeps the float table).
    prod = {o: n for n in g.node for o in n.output}
    transposed = []
    for n in g.node:
        if n.op_type == "MatMul" and len(n.input) == 2 and n.input[1] in prod:
            t = prod[n.input[1]]
            if (t.op_type == "Transpose" and t.input[0] in inits and len(inits[t.input[0]].dims) == 2
                    and inits[t.input[0]].data_type == onnx.TensorProto.FLOAT):
                transposed.append((n, t))
    for n, t in transposed:
        w = numpy_helper.to_array(inits[t.input[0]]).T.copy()
        name = t.input[0] + "_T"
        g.initializer.append(numpy_helper.from_array(w, name))
        inits[name] = g.initializer[-1]
        n.input[1] = name
        weights[name] = g.initializer[-1]
    casts = []
    for name, t in weights.items():
        half = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), name + "_f16")
        g.initializer.remove(t)
        g.initializer.append(half)
        casts.append(helper.make_node("Cast", [half.name], [name], to=onnx.TensorProto.FLOAT, name=name + "/Cast"))
    for i, c in enumerate(casts):
        g.node.insert(i, c)
    return len(casts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    m = onnx.load(args.model)
    n = convert(m)
    out = Path(args.output)
    big = sum(i.ByteSize() for i in m.graph.initializer) > 1_800_000_000
    onnx.save(m, str(out), save_as_external_data=big, location=out.name + ".data" if big else None)
    print(f"{n} MatMul weights to float16: {out}")


if __name__ == "__main__":
    main()
