# ONNX backend node tests (the onnx package's data, prepared by
# scripts/conformance_prepare.py from tests/conformance.manifest).
add_executable(conformance conformance_main.cpp)
target_link_libraries(conformance PRIVATE onebit)
target_compile_options(conformance PRIVATE ${ONEBIT_WARNINGS})

# A sanitized build runs the same cases on the data the main build prepared
# (ONEBIT_CONFORMANCE_DATA), without Python of its own.
if(NOT ONEBIT_PYTHON_TESTS)
  if(ONEBIT_CONFORMANCE_DATA)
    add_test(NAME conformance COMMAND conformance ${ONEBIT_CONFORMANCE_DATA})
    set_tests_properties(conformance PROPERTIES TIMEOUT 3600)
  endif()
  return()
endif()
set(ONEBIT_VENV_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
set(ONEBIT_CONFORMANCE_DIR ${PROJECT_BINARY_DIR}/conformance)
add_test(NAME conformance_prepare
  COMMAND ${CMAKE_COMMAND} -E env ONEBIT_PY=${ONEBIT_VENV_PYTHON}
          ${PROJECT_SOURCE_DIR}/scripts/run_python.sh
          ${PROJECT_SOURCE_DIR}/scripts/conformance_prepare.py
          --out ${ONEBIT_CONFORMANCE_DIR} --manifest ${CMAKE_CURRENT_SOURCE_DIR}/conformance.manifest)
set_tests_properties(conformance_prepare PROPERTIES FIXTURES_SETUP conformance_data TIMEOUT 900)
add_test(NAME conformance COMMAND conformance ${ONEBIT_CONFORMANCE_DIR})
set_tests_properties(conformance PROPERTIES FIXTURES_REQUIRED conformance_data TIMEOUT 1800)
