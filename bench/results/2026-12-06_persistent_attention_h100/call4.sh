#!/usr/bin/env bash
# session 17, call 4: build; the whole GPU suite; the persistent tests 3 times; the layer-by-layer step against the
# persistent kernel at batch 1, context 128 and 4096, two rounds; traces at context 128.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c4; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c4/m/*-hf' --exclude='c4/m/*/checkpoints' -czf $OUT/c4.tar.gz c4); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 ; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_1B olmo2_190M; do
  cat > $W/m/$size.yaml <<YAML
name: gen-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done; echo "models at $(el)s" ) &
models=$!
timeout 240 build/tests/fathom_gpu_tests > $W/gpu_tests.log 2>&1
echo "gpu suite rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_tests.log | head -20
grep -B3 -A12 "Failure" $W/gpu_tests.log | head -40
timeout 90 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' --gtest_repeat=3 > $W/gpu_persistent.log 2>&1
echo "persistent tests x3 rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_persistent.log | head -20
grep -B2 -A10 "Failure" $W/gpu_persistent.log | head -30
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size variant round
  local size=$1 v=$2 r=$3
  [ $(left) -lt 20 ] && return 1
  FATHOM_PERSISTENT_DECODE=$v timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size persistent=$v r$r" --tokens-out $W/tokens_${size}_${v}_$r.txt 2> $W/gen_${size}_${v}_$r.err | tee -a $W/generate.md
}
for size in olmo2_1B olmo2_190M; do
  gen $size off 1; gen $size on 1
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_off_1.txt $W/tokens_${size}_on_1.txt --names off on --label $size --min-tokens 32 >> $W/agreement.txt
  FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_TRACE=$W/trace_$size.csv timeout 20 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 0 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/persistent_trace.py $W/trace_$size.csv | tee -a $W/traces.txt
done
for size in olmo2_1B olmo2_190M; do gen $size on 2 && gen $size off 2; done
cat $W/agreement.txt
echo "end at $(el)s"
