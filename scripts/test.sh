#!/usr/bin/env bash
# Sets up (scripts/setup.sh --dev: the main job's packages and the tests')
# and runs every test with ctest. This is the command README.md gives for the
# tests, and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --dev
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
