# A8W8 QDQ exactness: 1bit's fused DequantizeLinear -> MatMul -> QuantizeLinear
# group against onnxruntime's CPU EP, element by element, plus the ONEBIT_QDQ=0
# control run and the refusal case (scripts/qdq_exactness.py; DESIGN.md,
# "Fused A8W8 group"). One test per case group:
#   small   8x16x6: proof graph, exact ties, per-axis scales, asymmetric and
#           per-axis zero points, uint8 activations, com.microsoft Q/DQ, and
#           the scale-along-K graph that must not fuse
#   large   256x1024x1024
#   proj    the five Qwen3-0.6B projection shapes at 5 and 32 rows
#   memory  peak RSS growth of `1bit run`, fused vs ONEBIT_QDQ=0, 256x1024x1024
# --require-fused: a build without the fused kernel (com.onebit::QDQMatMul)
# fails here instead of skipping.

foreach(group small large proj memory)
  add_test(NAME qdq_exactness_${group}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/run_python.sh ${PROJECT_SOURCE_DIR}/scripts/qdq_exactness.py
            --onebit $<TARGET_FILE:onebit_cli> --group ${group} --require-fused)
  set_tests_properties(qdq_exactness_${group} PROPERTIES TIMEOUT 600 LABELS qdq)
endforeach()
# Peak RSS is read per child process; running beside other tests only adds noise.
set_tests_properties(qdq_exactness_memory PROPERTIES RUN_SERIAL TRUE)

# Coverage on a real export: the tiny Qwen3 (2 layers) quantized MatMul-only
# by both producers must fuse 2 x 7 + 1 = 15 groups and refuse nothing
# (scripts/qdq_coverage.py reads ONEBIT_QDQ_DEBUG's report against the graph).
foreach(producer quark ort)
  set(a8w8 ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model-a8w8-${producer}.onnx)
  add_test(NAME quantize_tiny_a8w8_${producer}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/run_python.sh ${PROJECT_SOURCE_DIR}/scripts/quantize_a8w8.py
            ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model.onnx -o ${a8w8} --producer ${producer}
            --calib-samples 4 --calib-len 64)
  set_tests_properties(quantize_tiny_a8w8_${producer} PROPERTIES FIXTURES_REQUIRED tiny_qwen3
                       FIXTURES_SETUP tiny_a8w8_${producer} TIMEOUT 900 LABELS qdq)
  add_test(NAME qdq_coverage_tiny_${producer}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/run_python.sh ${PROJECT_SOURCE_DIR}/scripts/qdq_coverage.py ${a8w8}
            --onebit $<TARGET_FILE:onebit_cli> --expect-groups 15 --no-refusals)
  set_tests_properties(qdq_coverage_tiny_${producer} PROPERTIES FIXTURES_REQUIRED tiny_a8w8_${producer}
                       TIMEOUT 300 LABELS qdq)
  # The whole A8W8 model, fused, against onnxruntime running it node by node.
  add_test(NAME parity_run_tiny_a8w8_${producer}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/run_python.sh ${PROJECT_SOURCE_DIR}/scripts/check_run_parity.py
            --onebit $<TARGET_FILE:onebit_cli> --model ${a8w8} --tol 1e-4 --ort-opt disable)
  set_tests_properties(parity_run_tiny_a8w8_${producer} PROPERTIES FIXTURES_REQUIRED tiny_a8w8_${producer}
                       TIMEOUT 300 LABELS qdq)
endforeach()
