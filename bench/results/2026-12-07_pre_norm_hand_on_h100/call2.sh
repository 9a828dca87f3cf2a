#!/usr/bin/env bash
# session 28, call 2: a pre-norm block's last residual step handed on to the next block (its q/k/v launch at batch 1,
# its input norm's one pass otherwise), against FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=separate (the add at the block's
# end and the next block's own norm launch, the path before). GPU tests first. Then the Llama-3.2-1B shape beside
# gpt-fast at the tree's defaults (scripts/bench_generate_device.sh, 30 training steps), and on its exported weights
# three paired rounds of base/separate, batch 1 and 8, context 128 and 4096.
# Run as FATHOM_COMMIT=<sha> DEADLINE=<s> bash .devrun/s28c2.sh with carry [".devrun", ".debs", ".ref"].
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c28; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c28.tar.gz c28); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "built at $(el)s"
timeout 150 build/tests/fathom_gpu_tests --gtest_filter='*DecodeStep*:*Generat*:*ResidualStep*:*AddRmsNorm*:*Skinny*' > $W/gpu_tests.log 2>&1
echo "tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests.log
PEERS=gpt-fast LEVERS=skinny+fused+dependent+inside+cluster+splitk+prefetch timeout $(( $(left) - 120 )) \
  scripts/bench_generate_device.sh build $W/peers llama3_1B > $W/peers.log 2>&1
echo "peers rc=$? at $(el)s"; grep -E "^\| (fathom|gpt-fast)" $W/peers/generate.md | cut -c1-160; cat $W/peers/agreement.txt
M=/tmp/fathom-gen/llama3_1B-hf
b() {  # variant round
  [ $(left) -lt 25 ] && return
  local e="FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused"; [ $1 = separate ] && e="FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=separate"
  env $e timeout 40 build/bench/bench_generate hf:$M --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 3 \
    --label "llama3_1B $1 r$2" --tokens-out $W/tokens_$1_$2.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then order="base separate"; else order="separate base"; fi
  for v in $order; do b $v $r; done
done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
[ -f $W/tokens_separate_1.txt ] && python3 bench/compare_generate_tokens.py $W/tokens_base_1.txt $W/tokens_separate_1.txt \
  --names base separate --label llama3_1B | tee $W/agreement.txt
echo "end at $(el)s"
