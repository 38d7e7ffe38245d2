#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built by scripts/build_sanitized.sh
# into build-asan/), each on a working corpus seeded from the committed one.
#   scripts/fuzz.sh                      # every target, 60 s each
#   scripts/fuzz.sh onnx 3600            # one target, an hour
#   scripts/fuzz.sh npy 0 -runs=10000000 # until 10 M executions (extra libFuzzer flags after the seconds)
# Crashes land in build-asan/fuzz-crashes/<target>/ with the input that
# caused them; keep each as a regression seed (tests/fuzz/corpus/<target>/)
# once it is fixed. The last lines of each run are the executions and the
# coverage reached.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
targets=(onnx op npy tokenizer_json qwen3_tokenizer chat_template model_files npu_manifest)
if [ $# -ge 1 ] && [ "$1" != "all" ]; then targets=("$1"); fi
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : $# )) || true
[ -x "$root/build-asan/tests/fuzz/fuzz_npy" ] || scripts/build_sanitized.sh
for t in "${targets[@]}"; do
  bin="$root/build-asan/tests/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz.sh: no target '$t' (have: onnx op npy tokenizer_json qwen3_tokenizer chat_template model_files npu_manifest)" >&2; exit 2; }
  work="$root/build-asan/fuzz-work/$t" crashes="$root/build-asan/fuzz-crashes/$t"
  mkdir -p "$work" "$crashes"
  time_flag=()
  [ "$seconds" != "0" ] && time_flag=(-max_total_time="$seconds")
  echo "== fuzz_$t ${seconds}s $*"
  ASAN_OPTIONS=detect_leaks=1 "$bin" "${time_flag[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$@" "$work" "$root/tests/fuzz/corpus/$t" 2>&1 | tail -n 25
done
