#!/usr/bin/env bash
# session 21, call 1: build; the decoding GPU tests (the cluster merge's among them); olmo2_190M and olmo2_1B:
# attention's splits merged in a cluster (FATHOM_MERGE_IN_CLUSTER=on) against the combine kernel (off), batch 1 and
# 8, context 128 and 4096, two rounds in turn; bench_decode_attention; the rest of the GPU suite; CUPTI timelines.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c1/m/*-hf' --exclude='c1/m/*/checkpoints' -czf $OUT/c1.tar.gz c1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate bench_decode_attention fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_190M olmo2_1B; do
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
DEC='*DecodeAttention*:*DecodeStep*:*DecodePrologue*:*DependentLaunch*:*ResidualStep*:*Generat*'
timeout 120 build/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_decoding.log 2>&1
echo "decoding tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_decoding.log
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size label round env...
  local size=$1 label=$2 r=$3; shift 3
  [ $(left) -lt 30 ] && return 1
  env "$@" timeout 50 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 3 \
    --label "$size $label r$r" --tokens-out $W/tokens_${size}_${label}_$r.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2; do
  for size in olmo2_190M olmo2_1B; do
    if [ $r = 1 ]; then gen $size cluster $r FATHOM_MERGE_IN_CLUSTER=on; gen $size combine $r FATHOM_MERGE_IN_CLUSTER=off
    else gen $size combine $r FATHOM_MERGE_IN_CLUSTER=off; gen $size cluster $r FATHOM_MERGE_IN_CLUSTER=on; fi
  done
done
# The 190M with SwiGLU in gate/up's epilogue as well (measured 4% faster there, 3% slower at 1B, before).
for r in 1 2; do gen olmo2_190M cluster+swiglu $r FATHOM_MERGE_IN_CLUSTER=on FATHOM_SWIGLU_PROJECTION=fused; done
for size in olmo2_190M olmo2_1B; do
  [ -f $W/tokens_${size}_cluster_1.txt ] && python3 bench/compare_generate_tokens.py $W/tokens_${size}_combine_1.txt $W/tokens_${size}_cluster_1.txt --names combine cluster --label $size --min-tokens 32 >> $W/agreement.txt
done
cat $W/agreement.txt
[ $(left) -gt 60 ] && timeout 45 build/bench/bench_decode_attention 30 > $W/bench_decode_attention.md 2>&1; head -30 $W/bench_decode_attention.md
for size in olmo2_1B olmo2_190M; do
  for v in cluster combine; do
    [ $(left) -lt 120 ] && break
    on=$([ $v = cluster ] && echo on || echo off)
    FATHOM_MERGE_IN_CLUSTER=$on CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_${size}_$v.csv \
      timeout 25 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
    echo "== $size $v" >> $W/timelines.txt; python3 bench/timeline/gaps.py $W/tl_${size}_$v.csv --decode-steps 12 >> $W/timelines.txt 2>&1; gzip -f $W/tl_${size}_$v.csv
  done
done
head -c 5000 $W/timelines.txt
if [ $(left) -gt 40 ]; then
  timeout $(( $(left) - 15 )) build/tests/fathom_gpu_tests --gtest_filter="-$DEC" > $W/gpu_rest.log 2>&1
  echo "other tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_rest.log; tail -3 $W/gpu_rest.log
fi
echo "end at $(el)s"
