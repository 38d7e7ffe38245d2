#!/usr/bin/env python3
"""How much of a QDQ export 1bit fuses: groups fused, refusals by reason.

The format is A8W8 QDQ: int8 activations and int8 weights in
QuantizeLinear/DequantizeLinear pairs (scripts/quantize_qdq.py writes it).

Runs `ONEBIT_QDQ_DEBUG=1 1bit run MODEL` on one short input (a few token ids;
for a --cached export an empty `past`) and reads the fusion report the
session prints to stderr (graph/qdq_fusion.cpp):

    <model>: qdq_refused why=<reason> count=<n>        one line per reason
    <model>: qdq_fused groups=<N> with_q=<M> refused=<R>

and checks it against the graph itself (onnx, external data not read):
every MatMul is either a group candidate (a DequantizeLinear feeds at least
one of its inputs) or a float MatMul (attention's QK^T / AV in a MatMul-only
export), and the candidates must add up to fused + refused. The run itself
must succeed (the fused groups execute).

For the Qwen3-0.6B-shape MatMul-only export the expected numbers are
28 x 7 + 1 = 197 groups (7 projections per layer + the LM head) and no
refusal; the 56 attention MatMuls have no DQ and are not groups.

Exit 1 when the report disagrees with the graph, a refusal has no reason,
--expect-groups is not met, or --no-refusals is given and something was
refused, or the run fails. ctest runs the same checks as pytest tests
(scripts/tests/test_qdq_coverage.py), one per check.

Examples:
  scripts/run_python.sh scripts/qdq_coverage.py build-models/qwen3-0.6b/model-qdq-quark-pc.onnx \\
      --expect-groups 197 --no-refusals
  scripts/run_python.sh scripts/qdq_coverage.py build-models/smollm2-135m/model-cached-qdq-quark-pt.onnx --json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from onebit_tools import cli

REFUSED = re.compile(r"qdq_refused why=(\S*) count=(\d+)")
FUSED = re.compile(r"qdq_fused groups=(\d+) with_q=(\d+) refused=(\d+)")
Q_OPS = ("QuantizeLinear", "DequantizeLinear")


def graph_matmuls(path: Path) -> dict:
    """MatMuls of the top-level graph by what feeds them (no external data read)."""
    g = onnx.load(str(path), load_external_data=False).graph
    producer = {o: n for n in g.node for o in n.output}

    def dq(name: str) -> bool:
        p = producer.get(name)
        return p is not None and p.op_type == "DequantizeLinear" and p.domain in ("", "ai.onnx", "com.microsoft")

    kinds = Counter()
    for n in g.node:
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
            continue
        a, b = dq(n.input[0]), dq(n.input[1])
        kinds["both_dq" if a and b else "one_dq" if a or b else "float"] += 1
    q_domains = Counter(f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in g.node if n.op_type in Q_OPS)
    return {"matmuls": sum(kinds.values()), **kinds, "qdq_nodes": dict(q_domains)}


def feeds(path: Path, tokens: int) -> dict[str, np.ndarray]:
    g = onnx.load(str(path), load_external_data=False).graph
    out = {}
    for vi in g.input:
        tt = vi.type.tensor_type
        dtype = {onnx.TensorProto.INT64: np.int64, onnx.TensorProto.FLOAT: np.float32}[tt.elem_type]
        if vi.name == "input_ids":
            out[vi.name] = (np.arange(tokens, dtype=np.int64)[None, :] * 37 + 11).astype(dtype)
        elif vi.name == "past":
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
            dims[1] = 1
            out[vi.name] = np.zeros(dims, dtype)
        else:
            raise SystemExit(f"error: {path}: do not know how to feed input '{vi.name}'")
    return out


def run_report(onebit: str, model: Path, tokens: int) -> tuple[dict, str, int]:
    """`ONEBIT_QDQ_DEBUG=1 1bit run MODEL`: its fusion report, stderr and exit code."""
    r = cli.run(onebit, model, feeds(model, tokens), env={"ONEBIT_QDQ_DEBUG": "1"}, check=False)
    refused = Counter()
    fused = None
    for line in r.stderr.splitlines():
        if m := REFUSED.search(line):
            refused[m.group(1)] += int(m.group(2))
        elif m := FUSED.search(line):
            fused = {"groups": int(m.group(1)), "with_q": int(m.group(2)), "refused": int(m.group(3))}
    return {"fused": fused, "refused_by_reason": dict(refused)}, r.stderr, r.returncode


def problems(census: dict, report: dict, stderr: str, rc: int, expect_groups: int | None = None,
             no_refusals: bool = False) -> dict[str, str]:
    """check name -> what is wrong, for every check that fails (empty: all pass)."""
    out = {}
    fused = report["fused"]
    if rc != 0:
        out["run"] = f"1bit run failed ({rc}): {stderr.strip()[-500:]}"
    if fused is None:
        out["report"] = "no `qdq_fused` line in the ONEBIT_QDQ_DEBUG output"
        return out
    candidates = census.get("both_dq", 0) + census.get("one_dq", 0)
    if fused["groups"] + fused["refused"] != candidates:
        out["candidates"] = f"fused {fused['groups']} + refused {fused['refused']} != {candidates} MatMuls with a DQ input"
    if sum(report["refused_by_reason"].values()) != fused["refused"]:
        out["refusal_lines"] = "refusal lines do not add up to the refused count"
    if "" in report["refused_by_reason"]:
        out["refusal_reasons"] = "a refusal without a reason"
    if expect_groups is not None and fused["groups"] != expect_groups:
        out["expect_groups"] = f"expected {expect_groups} fused groups, got {fused['groups']}"
    if no_refusals and fused["refused"]:
        out["no_refusals"] = f"refused: {report['refused_by_reason']}"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path, help="a QDQ export (scripts/quantize_qdq.py)")
    p.add_argument("--onebit", default=cli.default_onebit(), help="the 1bit binary (default $ONEBIT_CLI, else build/1bit)")
    p.add_argument("--tokens", type=int, default=4, help="input length (default 4)")
    p.add_argument("--expect-groups", type=int, help="fail unless exactly this many groups are fused")
    p.add_argument("--no-refusals", action="store_true", help="fail if any group is refused")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)

    census = graph_matmuls(args.model)
    report, stderr, rc = run_report(args.onebit, args.model, args.tokens)
    problems_found = list(problems(census, report, stderr, rc, args.expect_groups, args.no_refusals).values())
    fused = report["fused"]
    result = {
        "model": str(args.model),
        "graph": census,
        **report,
        "run": "ok" if rc == 0 else "failed",
        "problems": problems_found,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.model}")
        print(f"  MatMuls            {census['matmuls']}: {census.get('both_dq', 0)} DQ on both inputs, "
              f"{census.get('one_dq', 0)} DQ on one, {census.get('float', 0)} float (not groups)")
        print(f"  Q/DQ nodes         {census['qdq_nodes']}")
        if fused:
            print(f"  fused groups       {fused['groups']} ({fused['with_q']} with the output QuantizeLinear folded)")
            print(f"  refused            {fused['refused']}"
                  + "".join(f"\n    {why:30s} {n}" for why, n in sorted(report["refused_by_reason"].items())))
        print(f"  run                {result['run']}")
        for problem in problems_found:
            print(f"  PROBLEM: {problem}")
    return 1 if problems_found else 0


if __name__ == "__main__":
    sys.exit(main())
