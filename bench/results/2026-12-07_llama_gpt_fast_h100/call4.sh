#!/usr/bin/env bash
# session 24, call 4: the README's peer rows at the current default: the Llama-3.2-1B shape, fathom beside gpt-fast
# (compiled) on the same exported weights, batch 1, 8, 32 and context 128, 4096; on an H200 first fathom alone on
# olmo2_1B and olmo2_190M at batch 1.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c7; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' --exclude='*.pt' -czf $OUT/c7.tar.gz c7); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
L=skinny+fused+dependent+inside+cluster+splitk
if grep -q H200 $W/device.txt; then
  PEERS= LEVERS=$L BATCHES=1 TRAIN_STEPS=3 REPEATS=3 timeout 120 scripts/bench_generate_device.sh build $W/olmo olmo2_1B olmo2_190M > $W/olmo_script.log 2>&1
  echo "olmo rows rc=$? at $(el)s"; grep '^|' $W/olmo/generate.md | tail -8
fi
PEERS=gpt-fast LEVERS=$L timeout $(( $(left) - 10 )) scripts/bench_generate_device.sh build $W/llama llama3_1B > $W/llama_script.log 2>&1
echo "llama rows rc=$? at $(el)s"; grep '^|' $W/llama/generate.md | tail -14; cat $W/llama/agreement.txt 2>/dev/null; tail -5 $W/llama_script.log
echo "end at $(el)s"
