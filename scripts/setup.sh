#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for 1bit, idempotently:
#   1. Debian packages (compiler toolchain, protobuf/onnx, CLI11, fmt, Catch2,
#      XRT, simdjson, pcre2, utf8proc, Google Benchmark);
#   2. the pinned Python venv (.venv, from requirements.txt) used for export,
#      quantization, reference checks and benchmarks — never by the runtime;
#   3. a Release build in build/.
# Re-running skips what is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

packages=(g++ cmake ninja-build pkg-config python3-venv libonnx-dev libprotobuf-dev protobuf-compiler
  libcli11-dev libfmt-dev catch2 libxrt-dev libsimdjson-dev libpcre2-dev libutf8proc-dev libbenchmark-dev)
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

# The venv is rebuilt only when requirements.txt changes.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # torch's wheels and their CUDA libraries make the venv ~6.5 GB; pip's
  # cache would double that, so it is not used.
  need_gb=8
  free_gb=$(df -Pk . | awk 'NR==2 {print int($4 / 1048576)}')
  if [ "$free_gb" -lt "$need_gb" ]; then
    echo "setup: the Python venv needs about $need_gb GB free in $root; $free_gb GB are" >&2
    echo "setup: free. Free some space and re-run scripts/setup.sh." >&2
    exit 1
  fi
  echo "setup: creating .venv from requirements.txt (torch is large; this takes a few minutes)"
  python3 -m venv .venv
  .venv/bin/pip install -q --no-cache-dir --upgrade pip
  .venv/bin/pip install -q --no-cache-dir -r requirements.txt
  echo "$want" > "$stamp"
fi

echo "setup: building (Release) in build/"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$root/build" -j "$(nproc)"
