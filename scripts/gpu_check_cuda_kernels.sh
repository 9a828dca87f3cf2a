#!/usr/bin/env bash
# One device session for the CUDA backend: GPU tests, the kernel benchmark, then compute-sanitizer
# memcheck over the GPU tests. Uses prebuilt binaries in $BIN (built on the workstation with
# -DFATHOM_CUDA=ON -DFATHOM_NATIVE=OFF) when they load there, else builds the tree in $SRC (system
# packages unpacked from $DEBS when missing). Logs go to $OUT.
# Usage: scripts/gpu_check_cuda_kernels.sh SRC BIN DEBS OUT
set -u
SRC=$1 BIN=$2 DEBS=$3 OUT=$4
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"

if ldd "$BIN/fathom_tests" | grep -q "not found" || ! "$BIN/fathom_tests" --gtest_list_tests >/dev/null 2>&1; then
  echo "prebuilt binaries do not load here; building" | tee -a "$OUT/device.txt"
  ldd "$BIN/fathom_tests" | grep "not found" | tee -a "$OUT/device.txt"
  mkdir -p /tmp/deps && for f in "$DEBS"/*.deb; do dpkg -x "$f" /tmp/deps; done
  export CPATH=/tmp/deps/usr/include:/tmp/deps/usr/include/eigen3 LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
  (cd "$SRC" && cmake -B /tmp/build -G Ninja -DFATHOM_CUDA=ON -DCMAKE_PREFIX_PATH=/tmp/deps/usr \
      -DEigen3_DIR=/tmp/deps/usr/share/eigen3/cmake -DCLI11_DIR=/tmp/deps/usr/share/cmake/CLI11 >"$OUT/build.log" 2>&1 &&
   ninja -C /tmp/build -j16 fathom_tests bench_cuda_kernels >>"$OUT/build.log" 2>&1) || { tail -40 "$OUT/build.log"; exit 1; }
  BIN=/tmp/build/tests; cp /tmp/build/bench/bench_cuda_kernels /tmp/build/tests/
fi

echo "== GPU tests"
timeout 150 "$BIN/fathom_tests" --gtest_filter='Gpu*' 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error|Expected|Which is|actual" | head -80
echo "== benchmark"
timeout 100 "$BIN/bench_cuda_kernels" 30 2>&1 | tee "$OUT/bench.md"
echo "== compute-sanitizer memcheck (caching off so bounds are exact)"
FATHOM_CUDA_NO_CACHE=1 timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/fathom_tests" \
  --gtest_filter='Gpu*:-GpuAllocator.*:GpuElementwise.GradNorm*:GpuEmbedding.BackwardIsBitIdentical*' >"$OUT/memcheck.log" 2>&1
echo "memcheck exit $?" | tee -a "$OUT/memcheck.log"
grep -E "ERROR SUMMARY|^\[  (FAILED|PASSED) |Invalid|========= " "$OUT/memcheck.log" | head -30
