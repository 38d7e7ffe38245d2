#!/usr/bin/env bash
# Runs a project script with the venv that scripts/setup.sh creates. Tests
# call Python through this so a missing venv is a clear failure, not a skip.
# scripts/ goes on PYTHONPATH, so the scripts and scripts/tests import the
# shared package (scripts/onebit_tools) and each other by name; e.g.
#   scripts/run_python.sh scripts/parity.py ...
#   scripts/run_python.sh -m pytest scripts/tests/test_census.py --onebit build/1bit
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${ONEBIT_PY:-$here/.venv/bin/python}"
if [ ! -x "$py" ]; then
  echo "error: $py not found; run scripts/setup.sh first (it creates the .venv with the pinned requirements)" >&2
  exit 1
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$here/scripts${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$@"
