#!/usr/bin/env bash
# The sanitized build: the whole tree with clang, AddressSanitizer,
# UndefinedBehaviorSanitizer and libFuzzer instrumentation, in build-asan/.
# Its ctest runs the C++ unit tests, the ONNX conformance cases (on the data
# the main build prepared) and a short smoke of every fuzz target.
#   scripts/build_sanitized.sh            # configure and build
#   ctest --test-dir build-asan -j2       # run them
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DONEBIT_SANITIZE=ON -DONEBIT_FUZZ=ON -DONEBIT_PYTHON_TESTS=OFF -DONEBIT_BENCH=OFF \
  -DONEBIT_CONFORMANCE_DATA="$root/build/conformance" > /dev/null
cmake --build "$root/build-asan" -j "$(nproc)"
