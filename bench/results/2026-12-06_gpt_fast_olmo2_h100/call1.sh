#!/usr/bin/env bash
# session 13, call 1: build; the decoding GPU tests (the chained-stop test among them); fathom and gpt-fast
# (OLMo2 adaptation, first run) and HF on olmo2_1B; bench_cuda_kernels decode and plain in the time left.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-575}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c1; mkdir -p $W
pack() { (cd /tmp && tar -czf $OUT/c1.tar.gz c1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16; } > $W/build.log 2>&1 || { tail -40 $W/build.log; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
DEC='*Skinny*:*Decod*:*Generat*:*Graph*:*RmsNorm*:*Swiglu*:*Elementwise*:*Argmax*:*Sampl*:*DependentLaunch*'
build/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_tests.log 2>&1
echo "decoding gpu tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|ChainedSteps' $W/gpu_tests.log | head -30
FATHOM_COMMIT=${FATHOM_COMMIT:-?} LEVERS=skinny+fused+dependent timeout $(( $(left) - 100 )) scripts/bench_generate_device.sh build $W/gen olmo2_1B > $W/gen.log 2>&1
echo "generate rc=$? at $(el)s"; cat $W/gen/agreement.txt; grep -E '^\| (fathom|gpt-fast|HF)' $W/gen/generate.md | head -30
t=$(( $(left) - 10 ))
[ $t -gt 20 ] && { timeout $t build/bench/bench_cuda_kernels 30 decode > $W/kernels_decode.md 2>&1; echo "kernels decode rc=$? at $(el)s"; }
t=$(( $(left) - 5 ))
[ $t -gt 20 ] && { timeout $t build/bench/bench_cuda_kernels 30 > $W/kernels.md 2>&1; echo "kernels rc=$? at $(el)s"; }
echo "end at $(el)s"
