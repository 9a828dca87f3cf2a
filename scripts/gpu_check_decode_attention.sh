#!/usr/bin/env bash
# One device session for decode attention: configures and builds only the test binary and the decode
# benchmark, runs the GPU decode tests (then the CPU ones, which check the reference they compare
# against), compute-sanitizer memcheck over the GPU decode tests, and the benchmark. Run from the
# repository root on the GPU machine; logs go to $OUT (default /tmp/decode_check).
# Usage: scripts/gpu_check_decode_attention.sh [OUT]
set -u
out=${1:-${OUT:-/tmp/decode_check}}
mkdir -p "$out"
jobs=$(nproc)
{
  git rev-parse --short HEAD 2>/dev/null || echo "commit unknown"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
} | tee "$out/device.txt"

echo "== build (fathom_tests, bench_decode_attention; -j$jobs)"
start=$(date +%s)
if ! { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON >"$out/build.log" 2>&1 &&
       cmake --build build -j"$jobs" --target fathom_tests bench_decode_attention >>"$out/build.log" 2>&1; }; then
  echo "build failed:"; grep -E "error|Error" "$out/build.log" | head -40; tail -20 "$out/build.log"; exit 1
fi
echo "built in $(( $(date +%s) - start )) s"
tests=build/tests/fathom_tests
bench=build/bench/bench_decode_attention

echo "== GPU decode tests"
timeout 240 "$tests" --gtest_filter='*GpuDecodeAttention*' >"$out/gpu_tests.log" 2>&1
echo "exit $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|Expected|Which is|relative L2|actual|error" "$out/gpu_tests.log" | head -60

echo "== CPU decode tests"
timeout 60 "$tests" --gtest_filter='DecodeAttention.*' 2>&1 | grep -E "^\[  (FAILED|PASSED) |Failure" | head -20

echo "== compute-sanitizer memcheck (caching off so bounds are exact)"
if command -v compute-sanitizer >/dev/null 2>&1; then
  FATHOM_CUDA_NO_CACHE=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests" \
    --gtest_filter='*GpuDecodeAttention.*B1_Tq5*:*GpuDecodeAttention.*len63_*:*GpuDecodeAttention.*len1_*:GpuDecodeAttentionDeterminism.*' \
    >"$out/memcheck.log" 2>&1
  echo "memcheck exit $?"
  grep -E "ERROR SUMMARY|^\[  (FAILED|PASSED) |Invalid|========= " "$out/memcheck.log" | head -20
else
  echo "compute-sanitizer not found; skipped"
fi

echo "== benchmark"
timeout 150 "$bench" 50 2>&1 | tee "$out/bench.md"
