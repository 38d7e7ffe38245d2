# End-to-end tests on small exported models. The exports are made once by
# scripts/export_onnx.py into ${PROJECT_BINARY_DIR}/models (cached: redone
# only when missing) and shared by the tests through a ctest fixture.
set(ONEBIT_RUN_PY ${PROJECT_SOURCE_DIR}/scripts/run_python.sh)
set(ONEBIT_TEST_MODELS ${PROJECT_BINARY_DIR}/models)
set(ONEBIT_TINY ${ONEBIT_TEST_MODELS}/qwen3-tiny)

add_test(NAME export_tiny_qwen3
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/test_models.py tiny --out ${ONEBIT_TINY})
set_tests_properties(export_tiny_qwen3 PROPERTIES FIXTURES_SETUP tiny_qwen3 TIMEOUT 900)

# Issue-2 parity: 1bit run vs onnxruntime on the same inputs, default and cached exports.
foreach(variant model model-cached)
  add_test(NAME parity_run_${variant}
    COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/check_run_parity.py
            --onebit $<TARGET_FILE:onebit_cli> --model ${ONEBIT_TINY}/${variant}.onnx --tol 1e-4)
  set_tests_properties(parity_run_${variant} PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)
  add_test(NAME parity_run_${variant}_no_passes
    COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/check_run_parity.py
            --onebit $<TARGET_FILE:onebit_cli> --model ${ONEBIT_TINY}/${variant}.onnx --tol 1e-4
            --onebit-arg=--stop-after-pass --onebit-arg=0)
  set_tests_properties(parity_run_${variant}_no_passes PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)
endforeach()

# `1bit inspect --json` against the onnx package's independent count.
add_test(NAME census_matches_onnx
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/check_census.py
          --onebit $<TARGET_FILE:onebit_cli> ${ONEBIT_TINY}/model.onnx ${ONEBIT_TINY}/model-cached.onnx)
set_tests_properties(census_matches_onnx PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 300)

# Issue-3 golden end to end: the tiny model decodes greedily to exactly the
# tokens transformers chooses on the same seeded weights (and agrees with
# onnxruntime), uncached and cached; one run goes through the tokenizer.
set(ONEBIT_TINY_REF --config ${PROJECT_SOURCE_DIR}/scripts/configs/qwen3-tiny.json --random-init --seed 0)
add_test(NAME golden_tiny_uncached
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/parity.py --onebit $<TARGET_FILE:onebit_cli>
          --model ${ONEBIT_TINY}/model.onnx --prompt-ids 9707,11,1879,374,264 -n 24 ${ONEBIT_TINY_REF})
add_test(NAME golden_tiny_cached
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/parity.py --onebit $<TARGET_FILE:onebit_cli>
          --model ${ONEBIT_TINY}/model-cached.onnx --prompt "Hello, world! The answer is" -n 32
          --onebit-arg=--cached ${ONEBIT_TINY_REF})
set_tests_properties(golden_tiny_uncached golden_tiny_cached PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 900)

# Bad input to the commands: clear messages, exit 1, no crash.
add_test(NAME cli_bad_input
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/check_cli_errors.py --onebit $<TARGET_FILE:onebit_cli>
          --tiny ${ONEBIT_TINY})
set_tests_properties(cli_bad_input PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# The session-kept KV cache: ort-run on the cached export with it and with
# ONEBIT_KV_STATE=0 (the exported Concats) — same tokens, bit-identical logits.
add_test(NAME kv_state_tiny_cached
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/check_kv_state.py --onebit $<TARGET_FILE:onebit_cli>
          --model ${ONEBIT_TINY}/model-cached.onnx --layers 2)
set_tests_properties(kv_state_tiny_cached PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)
