# qdq, static int8 in the A8W8 QDQ format (int8 activations and weights in
# QuantizeLinear/DequantizeLinear pairs). Exactness: 1bit's fused
# DequantizeLinear -> MatMul -> QuantizeLinear group against onnxruntime's
# CPU EP, element by element, plus the ONEBIT_QDQ=0 control run and the
# refusal case (scripts/tests/test_qdq_exactness.py; DESIGN.md, "Fused A8W8
# group"). One ctest test per case group, one pytest test per case and run:
#   small   8x16x6: proof graph, exact ties, per-axis scales, asymmetric and
#           per-axis zero points, uint8 activations, com.microsoft Q/DQ, and
#           the scale-along-K graph that must not fuse
#   large   256x1024x1024
#   proj    the five Qwen3-0.6B projection shapes at 5 and 32 rows
#   memory  peak RSS growth of `1bit run`, fused vs ONEBIT_QDQ=0, 256x1024x1024
# --require-fused: a build without the fused kernel (com.onebit::QDQMatMul)
# fails here instead of skipping.
include(${CMAKE_CURRENT_LIST_DIR}/pytest.cmake)
foreach(group small large proj memory)
  onebit_add_pytest(qdq_exactness_${group} TESTS test_qdq_exactness.py::test_${group} ARGS --require-fused)
  set_tests_properties(qdq_exactness_${group} PROPERTIES TIMEOUT 600 LABELS qdq)
endforeach()
# Peak RSS is read per child process; running beside other tests only adds noise.
set_tests_properties(qdq_exactness_memory PROPERTIES RUN_SERIAL TRUE)

# Coverage on a real export: the tiny Qwen3 (2 layers) quantized MatMul-only
# by both producers (scripts/quantize_qdq.py) must fuse 2 x 7 + 1 = 15 groups
# and refuse nothing (test_qdq_coverage.py reads ONEBIT_QDQ_DEBUG's report
# against the graph, one test per check).
foreach(producer quark ort)
  set(qdq_model ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model-qdq-${producer}.onnx)
  add_test(NAME quantize_tiny_qdq_${producer}
    COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/quantize_qdq.py
            ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model.onnx -o ${qdq_model} --producer ${producer}
            --calib-samples 4 --calib-len 64)
  set_tests_properties(quantize_tiny_qdq_${producer} PROPERTIES FIXTURES_REQUIRED tiny_qwen3
                       FIXTURES_SETUP tiny_qdq_${producer} TIMEOUT 900 LABELS qdq)
  onebit_add_pytest(qdq_coverage_tiny_${producer} TESTS test_qdq_coverage.py
    ARGS --model ${qdq_model} --expect-groups 15 --no-refusals)
  set_tests_properties(qdq_coverage_tiny_${producer} PROPERTIES FIXTURES_REQUIRED tiny_qdq_${producer}
                       TIMEOUT 300 LABELS qdq)
  # The whole qdq model, fused, against onnxruntime running it node by node.
  onebit_add_pytest(parity_run_tiny_qdq_${producer} TESTS test_run_parity.py
    ARGS --model ${qdq_model} --tol 1e-4 --ort-opt disable)
  set_tests_properties(parity_run_tiny_qdq_${producer} PROPERTIES FIXTURES_REQUIRED tiny_qdq_${producer}
                       TIMEOUT 300 LABELS qdq)
endforeach()

# The NPU dispatcher end to end on the reference device (software, not an
# NPU): the tiny Qwen3 exported with its KV cache, quantized by Quark, one
# M=16 design per projection shape (the LM head has none).
set(qdq_cached ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model-cached-qdq-quark.onnx)
add_test(NAME quantize_tiny_cached_qdq_quark
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/quantize_qdq.py
          ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model-cached.onnx -o ${qdq_cached} --producer quark
          --calib-samples 4 --calib-len 64)
set_tests_properties(quantize_tiny_cached_qdq_quark PROPERTIES FIXTURES_REQUIRED tiny_qwen3
                     FIXTURES_SETUP tiny_cached_qdq TIMEOUT 900 LABELS "qdq;npu")
onebit_add_pytest(npu_reference_e2e_tiny_qdq TESTS test_npu_e2e.py
  ARGS --model ${qdq_cached} --designs 16x64x64,16x64x32,16x64x128,16x128x64)
set_tests_properties(npu_reference_e2e_tiny_qdq PROPERTIES FIXTURES_REQUIRED tiny_cached_qdq TIMEOUT 600
                     LABELS "qdq;npu")
