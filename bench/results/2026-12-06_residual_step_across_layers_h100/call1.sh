#!/usr/bin/env bash
# session 20, call 1: build; the whole GPU suite (the landed tree's persistent/decoding changes and the residual step
# handed across layers); olmo2_190M and olmo2_1B: the layer-by-layer step with the step handed across layers
# (FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused) against without, batch 1, context 128 and 4096, two rounds;
# CUPTI timelines of both at context 128.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/a1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='a1/m/*-hf' --exclude='a1/m/*/checkpoints' -czf $OUT/a1.tar.gz a1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
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
timeout 100 build/tests/fathom_gpu_tests --gtest_filter='*ResidualStep*:*DecodeStep*:*Persistent*:*Skinny*' > $W/gpu_decoding.log 2>&1
echo "decoding tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_decoding.log
timeout 200 build/tests/fathom_gpu_tests --gtest_filter='-*ResidualStep*:*DecodeStep*:*Persistent*:*Skinny*' > $W/gpu_rest.log 2>&1
echo "other tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_rest.log
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size label round env...
  local size=$1 label=$2 r=$3; shift 3
  [ $(left) -lt 20 ] && return 1
  env "$@" timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size $label r$r" --tokens-out $W/tokens_${size}_${label}_$r.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2; do
  for size in olmo2_190M olmo2_1B; do
    gen $size across $r FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused
    gen $size own $r FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=separate
  done
done
for size in olmo2_190M olmo2_1B; do
  [ -f $W/tokens_${size}_across_1.txt ] && python3 bench/compare_generate_tokens.py $W/tokens_${size}_own_1.txt $W/tokens_${size}_across_1.txt --names own across --label $size --min-tokens 32 >> $W/agreement.txt
done
cat $W/agreement.txt
for size in olmo2_1B olmo2_190M; do
  for v in across own; do
    [ $(left) -lt 30 ] && break
    on=$([ $v = across ] && echo fused || echo separate)
    FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=$on CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_${size}_$v.csv \
      timeout 25 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
    echo "== $size $v" >> $W/timelines.txt; python3 bench/timeline/gaps.py $W/tl_${size}_$v.csv --decode-steps 12 >> $W/timelines.txt 2>&1; gzip -f $W/tl_${size}_$v.csv
  done
done
head -c 6000 $W/timelines.txt
echo "end at $(el)s"
