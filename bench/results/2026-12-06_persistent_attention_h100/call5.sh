#!/usr/bin/env bash
# session 17, call 5 (the warm machine of call 4, its build folder): rebuild after the revert; the persistent tests;
# olmo2_1B off/on at batch 1, context 128 and 4096.
set -uo pipefail
T0=$(date +%s); W=/tmp/c5; mkdir -p $W
pack() { (cd /tmp && tar -czf $OUT/c5.tar.gz c5); }
trap pack EXIT
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "commit ${FATHOM_COMMIT:-?}" > $W/device.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $W/device.txt
cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests > $W/build.log 2>&1 || { grep -B2 -A8 error $W/build.log | head -40; exit 1; }
echo "built at $(( $(date +%s) - T0 ))s"
timeout 40 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent.log 2>&1
echo "persistent tests rc=$?"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent.log
for v in off on; do FATHOM_PERSISTENT_DECODE=$v timeout 25 build/bench/bench_generate hf:/tmp/c4/m/olmo2_1B-hf --ids /tmp/c4/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 --label "olmo2_1B persistent=$v" 2>/dev/null | tee -a $W/generate.md; done
echo "end at $(( $(date +%s) - T0 ))s"
