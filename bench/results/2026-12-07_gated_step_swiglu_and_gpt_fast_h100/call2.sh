#!/usr/bin/env bash
# session 30, call 2 (on the machine call 1 left warm, its build reused, or a fresh build): the peers on the same GPU:
# scripts/bench_generate_device.sh with fathom's default decoding path (one lever) and gpt-fast (compiled,
# reduce-overhead) for the SIZES given, batch 1/8/32 x context 128/4096, token agreement. Stops at DEADLINE.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-550}
el() { echo $(( $(date +%s) - T0 )); }
W=/tmp/${TAG:-c30b}; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' -czf $OUT/${TAG:-c30b}.tar.gz $(basename $W)); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
LEVERS=skinny+fused+dependent+inside+cluster+splitk+prefetch PEERS="${PEERS-gpt-fast}" REPEATS=3 \
  timeout $(( DEADLINE - $(el) - 40 )) bash scripts/bench_generate_device.sh build $W/gen ${SIZES:-olmo2_1B llama3_1B} > $W/run.log 2>&1
echo "bench rc=$? at $(el)s"
pkill -f bench/gpt_fast_reference.py; pkill -f torch._inductor.compile_worker
cat $W/gen/generate.md 2>/dev/null | grep -v '^$' | tail -40; cat $W/gen/agreement.txt
if [ -n "${REST:-}" ] && [ $(( DEADLINE - $(el) )) -gt 90 ]; then
  timeout $(( DEADLINE - $(el) - 15 )) build/tests/fathom_gpu_tests --gtest_filter="$REST" > $W/gpu_rest2.log 2>&1
  echo "rest rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_rest2.log | tail -5
fi
echo "end at $(el)s"
