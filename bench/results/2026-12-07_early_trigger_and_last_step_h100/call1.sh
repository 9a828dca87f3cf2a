#!/usr/bin/env bash
# session 23, call 1 (prepared in session 22): build (and a second build with the skinny GEMM's last step of branch skinny-last-step, 'last'); the decoding and skinny GEMM GPU tests at HEAD (the one-tile cluster rule, the sm_90
# compile gate and the early GEMM trigger); default vs FATHOM_SKINNY_EARLY_TRIGGER=on (and vs last on the 190M), alternating rounds, on
# olmo2_1B, olmo2_190M and llama3_1B, batch 1 (and 8 for the 1B), context 128 and 4096; CUPTI timelines of both
# on the 1B; then the rest of the GPU suite until the deadline.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c1/m/*-hf' --exclude='c1/m/*/checkpoints' -czf $OUT/c1.tar.gz c1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
# The last-step variant: the same tree with the branch skinny-last-step kernel file, bench_generate only.
( mkdir -p /tmp/last && tar --exclude=./build -cf - . | tar -xf - -C /tmp/last && cd /tmp/last && cp .devrun/skinny_matmul_last_step.cu kernels/matmul/skinny_matmul.cu && \
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON > /dev/null && cmake --build build -j16 --target bench_generate fathom_gpu_tests > build.log 2>&1; \
  echo "last build rc=$? at $(el)s" ) > $W/last_build.txt 2>&1 &
lastbuild=$!
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_1B olmo2_190M llama3_1B; do
  if [ $size = llama3_1B ]; then model="{d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256, norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000, rope_scaling: {type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}}"; else model="{size: $size}"; fi
  cat > $W/m/$size.yaml <<YAML
name: gen-$size
model: $model
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done; echo "models at $(el)s" ) &
models=$!
DEC='*DecodeAttention*:*DecodeStep*:*DecodePrologue*:*DependentLaunch*:*ResidualStep*:*Generat*:*Skinny*'
timeout $(( $(left) - 60 < 150 ? $(left) - 60 : 150 )) build/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_decoding.log 2>&1
echo "decoding tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_decoding.log
wait $models; wait $lastbuild; cat $W/last_build.txt
[ -x /tmp/last/build/tests/fathom_gpu_tests ] && timeout 100 /tmp/last/build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*DecodeStep*' > $W/gpu_last.log 2>&1
echo "last-step tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_last.log
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
bench() {  # size variant round batches
  [ $(left) -lt 45 ] && return
  [ -d $W/m/$1-hf ] || return
  local early=off bin=build/bench/bench_generate; [ $2 = early ] && early=on; [ $2 = last ] && bin=/tmp/last/build/bench/bench_generate
  [ -x $bin ] || return
  FATHOM_SKINNY_EARLY_TRIGGER=$early timeout 40 $bin hf:$W/m/$1-hf --ids $W/ids.txt --context 128,4096 --batch $4 \
    --new-tokens 40 --repeats 3 --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
bench olmo2_190M last 1 1,8; bench olmo2_190M default 1 1,8; bench olmo2_190M early 1 1,8
bench olmo2_1B default 1 1; bench olmo2_1B early 1 1
bench olmo2_190M early 2 1,8; bench olmo2_190M default 2 1,8; bench olmo2_190M last 2 1,8
bench olmo2_1B early 2 1; bench olmo2_1B default 2 1
bench llama3_1B default 1 1; bench llama3_1B early 1 1
echo "bench done at $(el)s"
for s in olmo2_1B olmo2_190M llama3_1B; do for v in early last; do
  [ -f $W/tokens_${s}_default_1.txt ] && [ -f $W/tokens_${s}_${v}_1.txt ] && \
    python3 bench/compare_generate_tokens.py $W/tokens_${s}_default_1.txt $W/tokens_${s}_${v}_1.txt --names default $v --label $s >> $W/agreement.txt
done; done; grep -c AGREE $W/agreement.txt; grep -v AGREE $W/agreement.txt | head
for v in default early; do
  [ $(left) -lt 35 ] && break
  early=off; [ $v = early ] && early=on
  FATHOM_SKINNY_EARLY_TRIGGER=$early CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_1B_$v.csv \
    timeout 25 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  { echo "== olmo2_1B $v"; python3 bench/timeline/gaps.py $W/tl_1B_$v.csv --decode-steps 12; } >> $W/timelines.txt 2>&1; gzip -f $W/tl_1B_$v.csv
done
cat $W/timelines.txt 2>/dev/null | head -40
if [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 20 )) build/tests/fathom_gpu_tests --gtest_filter="-$DEC" > $W/gpu_rest.log 2>&1
  echo "rest rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|^\[ RUN' $W/gpu_rest.log | tail -3; grep -c '^\[       OK' $W/gpu_rest.log
fi
echo "end at $(el)s"
