"""onnxruntime sessions as the scripts make them: CPU execution provider only,
the graph optimization level by name, optional thread counts, session config
entries and the optimized graph written to a file."""
from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,  # onnxruntime's default
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,  # node by node: the reference semantics
}


def session(model: str | Path | bytes, opt: str = "all", threads: int | None = None, inter_threads: int | None = None,
            quiet: bool = False, optimized_path: str | Path | None = None, config: dict[str, str] | None = None,
            sequential: bool = False, mem_reuse: bool = True) -> ort.InferenceSession:
    """An InferenceSession on the CPU EP.

    opt: a key of LEVELS. threads / inter_threads: intra- and inter-op
    thread counts (None: onnxruntime's choice). quiet: log errors only
    (severity 3). optimized_path: where onnxruntime writes the graph it runs.
    config: session config entries. sequential: ORT_SEQUENTIAL execution.
    mem_reuse: False turns off onnxruntime's buffer reuse, which onnxruntime
    1.2x gets wrong on onnxruntime-genai's float16 CPU builds (the Casts it
    inserts around float16 nodes: "Shape mismatch attempting to re-use
    buffer" on the second step).
    """
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[opt]
    if threads is not None:
        so.intra_op_num_threads = threads
    if inter_threads is not None:
        so.inter_op_num_threads = inter_threads
    if quiet:
        so.log_severity_level = 3
    if optimized_path is not None:
        so.optimized_model_filepath = str(optimized_path)
    if sequential:
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not mem_reuse:
        so.enable_mem_reuse = False
        so.enable_mem_pattern = False
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


def write_published_quantized(model: str | Path, out: str | Path, quantizer: str) -> None:
    """The quantized file published beside an fp32 export, made from `model`:
    transformers.js' model_q4.onnx (quantizer "matmul_nbits": onnxruntime's
    MatMulNBitsQuantizer, symmetric, block 32, accuracy_level 4),
    model_quantized.onnx ("quantize_dynamic": int8 weights) or
    model_fp16.onnx ("fp16": convert_float_to_float16 keeping the inputs'
    and outputs' float32, as transformers.js' quantize.py calls it)."""
    import onnx

    if quantizer == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        onnx.save(convert_float_to_float16(onnx.load(str(model)), keep_io_types=True), str(out))
    elif quantizer == "matmul_nbits":
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        q = MatMulNBitsQuantizer(onnx.load(str(model)), block_size=32, is_symmetric=True, accuracy_level=4)
        q.process()
        q.model.save_model_to_file(str(out), use_external_data_format=False)
    elif quantizer == "quantize_dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8)
    else:
        raise ValueError(f"unknown quantizer {quantizer!r}: matmul_nbits, quantize_dynamic or fp16")
