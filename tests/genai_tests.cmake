# Newer opsets and the graphs people already have (issue 12): the op
# registry against the onnx package's schemas, and onnxruntime-genai's
# builds of a tiny model against onnxruntime and onnxruntime-genai's own
# generator.
include(${CMAKE_CURRENT_LIST_DIR}/pytest.cmake)

# Every ai.onnx op's registry entries span its schema versions up to the
# newest opset the pinned onnx defines (test_opset_ranges.py).
onebit_add_pytest(opset_ranges_match_onnx TESTS test_opset_ranges.py)
set_tests_properties(opset_ranges_match_onnx PROPERTIES TIMEOUT 300)
