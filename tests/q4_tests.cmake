# q4, 4-bit weight-only (issue 5): `1bit pack` output (Q4NX files) and
# onnxruntime's own MatMulNBits files, run by 1bit and by onnxruntime on the
# same inputs (scripts/tests/test_q4_ort.py). Both use the tiny Qwen3 export
# of model_tests.cmake (fixture tiny_qwen3).
#   q4_pack_vs_ort    test_pack: int4 block 32 / per channel / uint4 block 64 /
#                     float16 scales; onnx checker; onnxruntime loads each;
#                     1bit (act float) vs onnxruntime without optimizations;
#                     prints whether ORT_ENABLE_ALL turned DQ+MatMul into
#                     MatMulNBits
#   q4_nbits_vs_ort   test_nbits: MatMulNBitsQuantizer output (symmetric, zero points)
include(${CMAKE_CURRENT_LIST_DIR}/pytest.cmake)
foreach(group pack nbits)
  onebit_add_pytest(q4_${group}_vs_ort TESTS test_q4_ort.py::test_${group}
    ARGS --model ${PROJECT_BINARY_DIR}/models/qwen3-tiny/model.onnx --work ${PROJECT_BINARY_DIR}/test-scratch/q4_${group})
  set_tests_properties(q4_${group}_vs_ort PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 900 LABELS q4)
endforeach()
