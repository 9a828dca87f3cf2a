#!/usr/bin/env bash
# session 24, call 1 (prepared in session 23): build at HEAD (FATHOM_SKINNY_SPLIT_K_CTAS opt-in, never run on a GPU); the skinny GEMM, decoding-step and
# dependent-launch GPU tests; then on an H200 the README's rows: fathom's default path beside gpt-fast on the
# Llama-3.2-1B shape (batch 1, 8, 32; context 128, 4096), then fathom alone on olmo2_1B and olmo2_190M; on an H100 the
# rest of the GPU suite.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c4; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c4.tar.gz c4); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
FIRST='*Skinny*:*DecodeStep*:*DependentLaunch*'
timeout 90 build/tests/fathom_gpu_tests --gtest_filter="$FIRST" > $W/gpu_first.log 2>&1
echo "first tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_first.log
# CUPTI timelines of the default step, 190M and 1B, batch 1, context 128, read launch by launch.
mkdir -p $W/m
for size in olmo2_190M olmo2_1B; do
  cat > $W/m/$size.yaml <<YAML
name: tl-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
    build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
  CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_$size.csv timeout 40 \
    build/bench/bench_generate hf:$W/m/$size-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_$size.csv --decode-steps 12 --launches > $W/launches_$size.txt 2>&1; gzip -f $W/tl_$size.csv
done
cat $W/launches_*.txt; echo "timelines at $(el)s"
# Split K across cluster CTAs against the default, 190M and 1B, batch 1 and 8, contexts 128 and 4096, alternating.
bench_split() {  # size choice round
  [ $(left) -lt 60 ] && return
  FATHOM_SKINNY_SPLIT_K_CTAS=$2 timeout 40 build/bench/bench_generate hf:$W/m/$1-hf --context 128,4096 --batch 1,8 \
    --new-tokens 40 --repeats 3 --label "$1 splitk=$2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/split.md
}
for r in 1 2; do for size in olmo2_190M olmo2_1B; do
  if [ $r = 1 ]; then bench_split $size off $r; bench_split $size auto $r; else bench_split $size auto $r; bench_split $size off $r; fi
done; done
for size in olmo2_190M olmo2_1B; do
  [ -f $W/tokens_${size}_off_1.txt ] && [ -f $W/tokens_${size}_auto_1.txt ] && python3 bench/compare_generate_tokens.py \
    $W/tokens_${size}_off_1.txt $W/tokens_${size}_auto_1.txt --names off auto --label $size >> $W/agreement.txt
done; cat $W/agreement.txt 2>/dev/null
if grep -q H200 $W/device.txt; then
  PEERS= LEVERS=skinny+fused+dependent+inside+cluster BATCHES=1 TRAIN_STEPS=3 \
    REPEATS=3 timeout 120 scripts/bench_generate_device.sh build $W/olmo olmo2_1B olmo2_190M > $W/olmo_script.log 2>&1
  echo "olmo rows rc=$? at $(el)s"; grep '^|' $W/olmo/generate.md | tail -8
  batches=1; [ $(left) -gt 300 ] && batches=1,8,32
  PEERS=gpt-fast LEVERS=skinny+fused+dependent+inside+cluster BATCHES=$batches \
    timeout $(( $(left) - 10 )) scripts/bench_generate_device.sh build $W/llama llama3_1B > $W/llama_script.log 2>&1
  echo "llama rows rc=$? at $(el)s"; grep '^|' $W/llama/generate.md | tail -14; cat $W/llama/agreement.txt 2>/dev/null
else
  timeout $(( $(left) - 15 )) build/tests/fathom_gpu_tests --gtest_filter="-$FIRST" > $W/gpu_rest.log 2>&1
  echo "rest rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|^\[ RUN' $W/gpu_rest.log | tail -3
fi
echo "end at $(el)s"
