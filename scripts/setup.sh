#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for 1bit, idempotently:
#   1. Debian packages (compiler toolchain, protobuf/onnx, CLI11, fmt, Catch2,
#      XRT, simdjson, pcre2, utf8proc, Google Benchmark);
#   2. the pinned Python venv (.venv; scripts/setup_venv.sh) used for export,
#      quantization, reference checks and benchmarks — never by the runtime:
#      the main job's requirements.txt, and with --dev (scripts/test.sh) the
#      tests' and benchmarks' requirements-dev.txt too;
#   3. a Release build in build/ (the `1bit` binary; with --dev every target); with --dev also the sanitized clang build
#      (ASan + UBSan + libFuzzer, scripts/build_sanitized.sh) in build-asan/,
#      whose tests the main build's ctest runs.
# Re-running skips what is already done.
#   scripts/setup.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv_args=()
dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) venv_args+=(--dev); dev=1 ;;
    *) echo "usage: scripts/setup.sh [--dev]" >&2; exit 2 ;;
  esac
done

packages=(g++ cmake ninja-build pkg-config python3-venv libonnx-dev libprotobuf-dev protobuf-compiler
  libcli11-dev libfmt-dev catch2 libxrt-dev libsimdjson-dev libpcre2-dev libutf8proc-dev libbenchmark-dev libedit-dev
  nlohmann-json3-dev)
# The tests' sanitized build and fuzzers need clang with its runtimes.
[ "$dev" = 1 ] && packages+=(clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

scripts/setup_venv.sh "${venv_args[@]}"

sanitized=()
if [ "$dev" = 1 ]; then
  echo "setup: building the sanitized tree (clang, ASan + UBSan, libFuzzer) in build-asan/"
  scripts/build_sanitized.sh
  sanitized=(-DONEBIT_SANITIZED_DIR="$root/build-asan")
fi
# The main job needs only the `1bit` binary; the tests build everything.
targets=(--target onebit_cli)
[ "$dev" = 1 ] && targets=()
echo "setup: building (Release) in build/"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${sanitized[@]}" > /dev/null
cmake --build "$root/build" -j "$(nproc)" "${targets[@]}"
