# End-to-end tests on small exported models. The exports are made once by
# scripts/export_onnx.py into ${PROJECT_BINARY_DIR}/models (cached: redone
# only when missing) and shared by the tests through a ctest fixture. The
# checks are pytest modules in scripts/tests/ (tests/pytest.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/pytest.cmake)
set(ONEBIT_TEST_MODELS ${PROJECT_BINARY_DIR}/models)
set(ONEBIT_TINY ${ONEBIT_TEST_MODELS}/qwen3-tiny)

add_test(NAME export_tiny_qwen3
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/test_models.py tiny --out ${ONEBIT_TINY})
set_tests_properties(export_tiny_qwen3 PROPERTIES FIXTURES_SETUP tiny_qwen3 TIMEOUT 900)

# Issue-2 parity: 1bit run vs onnxruntime on the same inputs, default and
# cached exports, every output, past 0 and 5 (test_run_parity.py).
foreach(variant model model-cached)
  onebit_add_pytest(parity_run_${variant} TESTS test_run_parity.py
    ARGS --model ${ONEBIT_TINY}/${variant}.onnx --tol 1e-4)
  set_tests_properties(parity_run_${variant} PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)
  onebit_add_pytest(parity_run_${variant}_no_passes TESTS test_run_parity.py
    ARGS --model ${ONEBIT_TINY}/${variant}.onnx --tol 1e-4 --onebit-arg=--stop-after-pass --onebit-arg=0)
  set_tests_properties(parity_run_${variant}_no_passes PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)
endforeach()

# `1bit inspect --json` against the onnx package's independent count, field by field (test_census.py).
onebit_add_pytest(census_matches_onnx TESTS test_census.py
  ARGS --model ${ONEBIT_TINY}/model.onnx --model ${ONEBIT_TINY}/model-cached.onnx)
set_tests_properties(census_matches_onnx PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 300)

# Issue-3 golden end to end: the tiny model decodes greedily to exactly the
# tokens transformers chooses on the same seeded weights (and agrees with
# onnxruntime), uncached and cached; the cached run goes through the
# tokenizer (test_golden_tiny.py).
onebit_add_pytest(golden_tiny_uncached TESTS test_golden_tiny.py::test_default ARGS --tiny ${ONEBIT_TINY})
onebit_add_pytest(golden_tiny_cached TESTS test_golden_tiny.py::test_cached ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(golden_tiny_uncached golden_tiny_cached PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 900)

# Bad input to the commands: clear messages, exit 1, no crash (test_cli_errors.py, one test per case).
onebit_add_pytest(cli_bad_input TESTS test_cli_errors.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(cli_bad_input PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# The session-kept KV cache: ort-run on the cached export with it and with
# ONEBIT_KV_STATE=0 (the exported Concats) — same tokens, bit-identical
# logits, KvAppend in the profile (test_kv_state.py).
onebit_add_pytest(kv_state_tiny_cached TESTS test_kv_state.py
  ARGS --model ${ONEBIT_TINY}/model-cached.onnx --layers 2)
set_tests_properties(kv_state_tiny_cached PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)
# The same on the float16 export: the fused float16 attention over the state
# (a block of rows at a time, each P rounded to float16) against the
# float16 nodes over the exported cache, bit for bit.
onebit_add_pytest(kv_state_tiny_cached_f16 TESTS test_kv_state.py
  ARGS --model ${ONEBIT_TINY}/model-cached-f16.onnx --layers 2)
set_tests_properties(kv_state_tiny_cached_f16 PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# The chat loop on the tiny export (tests/test_chat_session.cpp's hidden
# [.tiny] cases): three piped turns, each prefilling only its own tokens,
# answers identical to fresh runs on the conversation; a stop string split
# over two tokens; the same seed across thread counts.
add_test(NAME chat_session_tiny COMMAND test_chat_session "[tiny]" -w NoTests)
set_tests_properties(chat_session_tiny PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600
  ENVIRONMENT "ONEBIT_TINY=${ONEBIT_TINY}")

# `1bit chat` and `ort-run` through the binary: a chat driven through a pipe
# for three turns (--json: prefill counts, answers against ort-run on the
# conversation's ids), --stop, --json, sampling (test_chat_cli.py).
onebit_add_pytest(chat_cli_tiny TESTS test_chat_cli.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(chat_cli_tiny PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# Determinism: the same bits across runs and across 1 and 2 threads.
onebit_add_pytest(determinism_tiny TESTS test_determinism.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(determinism_tiny PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# Exact lookup decoding: `ort-run --lookup 4` chooses the plain greedy tokens
# with bit-identical logits on the uncached, cached, QDQ, opset-23 and
# onnxruntime-genai fp32 / int4 graphs, over repeating and random prompts
# (test_lookup.py).
onebit_add_pytest(lookup_is_greedy TESTS test_lookup.py
  ARGS --tiny ${ONEBIT_TINY} --genai ${PROJECT_BINARY_DIR}/models/genai-tiny)
set_tests_properties(lookup_is_greedy PROPERTIES FIXTURES_REQUIRED "tiny_qwen3;genai_tiny;tiny_cached_qdq" TIMEOUT 900)
