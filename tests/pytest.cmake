# onebit_add_pytest(<ctest name> TESTS <node id>... [ARGS <pytest argument>...])
#
# One ctest test that runs pytest on node ids of scripts/tests/ (a module,
# e.g. test_census.py, or one function of it, test_q4_ort.py::test_pack, for
# one group of cases) through scripts/run_python.sh, with --onebit the 1bit
# built here. Each case has its own pytest test id in the output
# (test_output[model.onnx-past0-logits]). pytest's exit code is the test's
# result: 1 when a case fails, 5 when nothing ran or nothing passed (nothing
# collected, everything deselected or skipped; scripts/tests/conftest.py), and
# ctest counts every non-zero exit as a failure. The temporary files go under
# test-scratch/pytest/<ctest name> in the build directory (pytest empties it
# at the start of a run and keeps a failed case's files).
include_guard(GLOBAL)
set(ONEBIT_RUN_PY ${PROJECT_SOURCE_DIR}/scripts/run_python.sh)
set(ONEBIT_PYTEST_DIR ${PROJECT_SOURCE_DIR}/scripts/tests)

function(onebit_add_pytest name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "TESTS;ARGS")
  if(NOT arg_TESTS)
    message(FATAL_ERROR "onebit_add_pytest(${name}): no TESTS")
  endif()
  list(TRANSFORM arg_TESTS PREPEND ${ONEBIT_PYTEST_DIR}/)
  add_test(NAME ${name}
    COMMAND ${ONEBIT_RUN_PY} -m pytest ${arg_TESTS} --onebit $<TARGET_FILE:onebit_cli>
            --basetemp ${PROJECT_BINARY_DIR}/test-scratch/pytest/${name} ${arg_ARGS})
endfunction()
