#!/usr/bin/env bash
# One device session: every test (the GPU ones run instead of skipping), then a short GPU training run
# of the quickstart recipe. Uses binaries built on a workstation with
#   cmake -B build-cuda -G Ninja -DFATHOM_CUDA=ON -DFATHOM_NATIVE=OFF
# carried in $BIN (with any shared libraries the device lacks in $BIN/lib). Logs go to $OUT.
# Usage: scripts/gpu_check.sh BIN OUT
set -u
BIN=$1 OUT=$2
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/device.txt"
ldd "$BIN/fathom_tests" | grep "not found" | tee -a "$OUT/device.txt"

echo "== all tests"
timeout 300 "$BIN/fathom_tests" 2>&1 > "$OUT/tests.log"
echo "tests exit $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure" "$OUT/tests.log" | head -40
grep -E "^\[       OK \] Gpu" "$OUT/tests.log" | wc -l | sed 's/^/GPU tests passed: /'

echo "== quickstart on the GPU, 100 steps"
timeout 120 "$BIN/fathom" train recipes/quickstart.yaml --set train.steps=100 --set log.dir=/tmp/qs-gpu \
  --set eval.every=0 2>&1 | tee "$OUT/quickstart_gpu.log" | tail -8
