#!/usr/bin/env bash
# The parity runs docs/parity.md records for the default model: 1bit's greedy
# loop against onnxruntime (same graph) and transformers (same weights), for
# the cached and the uncached export, and the two 1bit runs against each
# other. Usage: scripts/parity_default.sh [PROMPT] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
m=build-models/smollm2-135m
prompt=${1:-"Write a short story about a lighthouse keeper who finds a message in a bottle."}
n=${2:-96}
out=build/parity
mkdir -p "$out"
py=scripts/run_python.sh
$py scripts/parity.py --onebit build/1bit --model $m/model-cached.onnx --hf $m --prompt "$prompt" -n "$n" \
  --onebit-arg=--cached --onebit-arg=--chat --json $out/cached.json
$py scripts/parity.py --onebit build/1bit --model $m/model.onnx --hf $m --prompt "$prompt" -n "$n" \
  --onebit-arg=--chat --json $out/uncached.json
build/1bit ort-run $m/model-cached.onnx --cached --chat --prompt "$prompt" -n "$n" --dump-logits $out/cached.npy --quiet > /dev/null
build/1bit ort-run $m/model.onnx --chat --prompt "$prompt" -n "$n" --dump-logits $out/uncached.npy --quiet > /dev/null
$py scripts/parity.py --onebit build/1bit --model $m/model-cached.onnx --prompt "$prompt" -n "$n" \
  --onebit-arg=--cached --onebit-arg=--chat --compare $out/uncached.npy --json $out/cached_vs_uncached.json
