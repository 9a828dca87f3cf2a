#!/usr/bin/env bash
# Installs fathom's system packages (Debian/Ubuntu) where missing, then configures and builds it.
# Usage: scripts/setup.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-matplotlib, python3-yaml: scripts/tables.py draws its figures and reads the recipes its runs wrote,
# and its ctest runs one table.
# Open MPI: data-parallel launch and the CPU communicator (its tests run under mpirun).
packages=(cmake ninja-build g++ pkg-config libeigen3-dev libyaml-cpp-dev libcli11-dev libgtest-dev libpcre2-dev
          python3 python3-matplotlib python3-yaml libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}" || {
    "${sudo_cmd[@]}" apt-get update -q && "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}"
  }
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
