"""bitsandbytes 4-bit weights (transformers.js' model_bnb4.onnx): the tiny
Qwen3's cached export through onnxruntime's MatMulBnb4Quantizer, FP4 and NF4,
at blocks that divide K and one (256) that spans several rows of Wᵀ. 1bit dequantizes
each weight once at load to float32 (quant/bnb4.h) and runs the float GEMM;
onnxruntime dequantizes the same way, so teacher-forced on 1bit's tokens
the logits agree to float rounding: mean KL <= 1e-6, top-1 on every step.
The tables, nibble order and blocking are what this checks against
onnxruntime; the C++ tests (test_bnb4) hold the kernel to them.

  pytest scripts/tests/test_bnb4.py --onebit build/1bit --tiny build/models/qwen3-tiny
"""
from __future__ import annotations

import pytest

import parity
from conftest import tiny

PROMPT = [9707, 11, 1879, 374, 264]
STEPS = 24


@pytest.mark.parametrize("quant_type,block", [(0, 64), (1, 64), (1, 256)])
def test_bnb4_matches_onnxruntime(onebit, pytestconfig, tmp_path, quant_type, block):
    import onnx
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

    src = tiny(pytestconfig) / "model-cached.onnx"
    model = tmp_path / "model_bnb4.onnx"
    q = MatMulBnb4Quantizer(onnx.load(str(src)), quant_type, block)
    q.process()
    q.model.save_model_to_file(str(model), True)
    nodes = [n for n in onnx.load(str(model), load_external_data=False).graph.node if n.op_type == "MatMulBnb4"]
    assert len(nodes) >= 8, f"the quantizer wrote {len(nodes)} MatMulBnb4 nodes"
    got, ids, prompt_ids = parity.run_onebit(onebit, str(model), ["--prompt-ids", ",".join(map(str, PROMPT))], STEPS,
                                             [], str(tmp_path / "onebit.npy"))
    ref, ref_ids = parity.ort_greedy(str(model), prompt_ids, STEPS, parity.eos_ids(str(model)), follow=ids)
    s = parity.compare(ref, ref_ids, got, ids)
    print(parity.report(f"bnb4_type{quant_type}_block{block}", s))
    assert s["steps_ref"] == s["steps_1bit"]
    assert s["top1"] == 1.0 and s["mean_kl"] <= 1e-6
