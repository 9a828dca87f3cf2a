#!/usr/bin/env bash
# The whole GPU check, on a machine with an NVIDIA GPU: a CUDA build, the GPU tests (ctest label `gpu`,
# run here with their full log), every other test, then the quickstart trained on the GPU.
# Logs and a summary go to OUT (default: gpu-check/). Exits non-zero when any part fails.
# Usage: scripts/gpu_check.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-gpu-check}")
mkdir -p "$out"
status=0
step() { echo "== $*" | tee -a "$out/summary.txt"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt" ||
  { echo "no NVIDIA GPU here: nothing to check" >&2; exit 1; }
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >> "$out/device.txt"

step "build (CUDA on)"
if ! { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON &&
       cmake --build build -j "$(nproc)"; } > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi

step "GPU tests (ctest -L gpu)"
build/tests/fathom_gpu_tests > "$out/gpu_tests.log" 2>&1 || status=1
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]" "$out/gpu_tests.log" | tee -a "$out/summary.txt" | tail -20

step "every other test (ctest -LE gpu)"
ctest --test-dir build -LE gpu -j "$(nproc)" --output-on-failure > "$out/tests.log" 2>&1 || status=1
grep -E "tests passed|tests failed|Failed|\(Skipped\)" "$out/tests.log" | tee -a "$out/summary.txt"

step "quickstart on the GPU"
build/fathom train recipes/quickstart.yaml --set "log.dir=$out/quickstart-run" --overwrite \
  > "$out/quickstart.log" 2>&1 || status=1
tail -4 "$out/quickstart.log" | tee -a "$out/summary.txt"

step "exit $status"
exit $status
