#!/usr/bin/env bash
# Runs a project script with the venv that scripts/setup.sh creates. Tests
# call Python through this so a missing venv is a clear failure, not a skip.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${ONEBIT_PY:-$here/.venv/bin/python}"
if [ ! -x "$py" ]; then
  echo "error: $py not found; run scripts/setup.sh first (it creates the .venv with the pinned requirements)" >&2
  exit 1
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
exec "$py" "$@"
