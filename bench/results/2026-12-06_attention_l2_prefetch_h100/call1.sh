#!/usr/bin/env bash
# session 16, call 1: build; the persistent tests (new cases) and the tests of attention's L2 prefetch; the three
# models; A/B of FATHOM_DECODE_L2_PREFETCH off/on (olmo2_1B, olmo2_190M, llama3_1B; batch 1, 8; context 128, 4096;
# two rounds on the 1B); CUPTI timelines of the 1B at batch 1, context 128, both ways.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c1/m/*-hf' --exclude='c1/m/*/checkpoints' --exclude='*.csv' -czf $OUT/c1.tar.gz c1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_1B olmo2_190M llama3_1B; do
  model="{size: $size}"
  [ $size = llama3_1B ] && model="{d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256, norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000, rope_scaling: {type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}}"
  cat > $W/m/$size.yaml <<YAML
name: gen-$size
model: $model
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 10, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 5}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done; echo "models at $(el)s" ) &
models=$!
timeout 120 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent.log 2>&1
echo "persistent tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_persistent.log | head -20
grep -B2 -A10 "Failure" $W/gpu_persistent.log | head -40
timeout 150 build/tests/fathom_gpu_tests --gtest_filter='*L2*:GpuDecodePrologue.*:*DependentLaunch*:GpuDecodeStep.*' > $W/gpu_l2.log 2>&1
echo "l2/decode tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_l2.log | head -20
grep -B2 -A10 "Failure" $W/gpu_l2.log | head -40
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size variant round
  local size=$1 v=$2 r=$3
  [ $(left) -lt 35 ] && return 1
  FATHOM_DECODE_L2_PREFETCH=$v timeout 60 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 4 \
    --label "$size l2=$v r$r" --tokens-out $W/tokens_${size}_${v}_$r.txt 2> $W/gen_${size}_${v}_$r.err | tee -a $W/generate.md
  tail -2 $W/gen_${size}_${v}_$r.err
}
for size in olmo2_1B olmo2_190M llama3_1B; do
  [ -d $W/m/$size-hf ] || { echo "no $size model"; tail -3 $W/m/train_$size.log; continue; }
  gen $size off 1; gen $size on 1
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_off_1.txt $W/tokens_${size}_on_1.txt --names off on --label $size --min-tokens 32 >> $W/agreement.txt
done
for v in off on; do
  [ $(left) -lt 40 ] && break
  FATHOM_DECODE_L2_PREFETCH=$v CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_$v.csv timeout 30 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_$v.csv --decode-steps 12 > $W/steps_olmo2_1B_l2_$v.txt 2>&1; head -16 $W/steps_olmo2_1B_l2_$v.txt
done
for size in olmo2_1B olmo2_190M llama3_1B; do gen $size on 2 && gen $size off 2; done
cat $W/agreement.txt
echo "end at $(el)s"
