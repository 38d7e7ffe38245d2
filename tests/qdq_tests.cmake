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
# While com.onebit::QDQMatMul has no kernel the script still gates the control
# runs and then exits 77, which ctest reports as skipped.

foreach(group small large proj memory)
  add_test(NAME qdq_exactness_${group}
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/run_python.sh ${PROJECT_SOURCE_DIR}/scripts/qdq_exactness.py
            --onebit $<TARGET_FILE:onebit_cli> --group ${group})
  set_tests_properties(qdq_exactness_${group} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS qdq)
endforeach()
# Peak RSS is read per child process; running beside other tests only adds noise.
set_tests_properties(qdq_exactness_memory PROPERTIES RUN_SERIAL TRUE)
