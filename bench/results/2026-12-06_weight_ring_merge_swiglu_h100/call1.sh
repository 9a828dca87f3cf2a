#!/usr/bin/env bash
# session 14, call 1: build; the GPU tests of the weight ring, the merge inside attention's split kernel and
# down_proj reading SwiGLU's inputs; bench_cuda_kernels decode with the ring off and on; A/B (base, M merge, G ring,
# S SwiGLU in down_proj, MGS all three) on olmo2_1B, olmo2_190M, llama3_1B at batch 1 and 8, context 128 and 4096;
# a second round at batch 1 / 128; MGS's timeline.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-575}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c1/m/*-hf' --exclude='c1/m/*/checkpoints' -czf $OUT/c1.tar.gz c1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $W/device.txt
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
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 30, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 5}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done; echo "models at $(el)s" ) &
models=$!
NEW='*Ring*:*Merge*:*OfSwiglu*:GpuDecodeStep.*'
timeout 150 build/tests/fathom_gpu_tests --gtest_filter="$NEW" > $W/gpu_tests_new.log 2>&1
echo "new gpu tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Ring|Merge' $W/gpu_tests_new.log | head -40
grep -B3 -A12 "Failure" $W/gpu_tests_new.log | head -40
wait $models
for ring in off on; do
  FATHOM_SKINNY_RING=$ring timeout 60 build/bench/bench_cuda_kernels 30 decode > $W/kernels_decode_ring_$ring.md 2>&1
  echo "kernels ring $ring rc=$? at $(el)s"
done
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
variant_env() {
  case $1 in
    base) echo "FATHOM_COMBINE_IN_ATTENTION=separate FATHOM_SKINNY_RING=off FATHOM_SWIGLU_IN_DOWN=separate" ;;
    M) echo "FATHOM_COMBINE_IN_ATTENTION=fused FATHOM_SKINNY_RING=off FATHOM_SWIGLU_IN_DOWN=separate" ;;
    G) echo "FATHOM_COMBINE_IN_ATTENTION=separate FATHOM_SKINNY_RING=on FATHOM_SWIGLU_IN_DOWN=separate" ;;
    S) echo "FATHOM_COMBINE_IN_ATTENTION=separate FATHOM_SKINNY_RING=off FATHOM_SWIGLU_IN_DOWN=fused" ;;
    MGS) echo "FATHOM_COMBINE_IN_ATTENTION=fused FATHOM_SKINNY_RING=on FATHOM_SWIGLU_IN_DOWN=fused" ;;
  esac
}
for size in olmo2_1B olmo2_190M llama3_1B; do
  [ -d $W/m/$size-hf ] || { echo "no $size model"; tail -3 $W/m/train_$size.log; continue; }
  for v in base M G S MGS; do
    [ $(left) -lt 60 ] && break 2
    env $(variant_env $v) timeout 60 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 4 \
      --label "$size $v" --tokens-out $W/tokens_${size}_$v.txt 2> $W/gen_${size}_$v.err | tee -a $W/generate.md
  done
  for v in M G S MGS; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_base.txt $W/tokens_${size}_$v.txt --names base $v --label $size --min-tokens 32 >> $W/agreement.txt; done
  echo "$size rows at $(el)s"
done
cat $W/agreement.txt
for size in olmo2_1B olmo2_190M; do
  for v in base MGS base MGS; do
    [ $(left) -lt 45 ] && break 2
    env $(variant_env $v) timeout 30 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --repeats 4 \
      --label "$size $v round 2" 2>/dev/null | tee -a $W/generate.md
  done
done
for v in MGS; do
  [ $(left) -lt 25 ] && break
  env $(variant_env $v) CUDA_INJECTION64_PATH=$PWD/build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_olmo2_1B_$v.csv \
    timeout 30 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_olmo2_1B_$v.csv --decode-steps 12 > $W/steps_olmo2_1B_$v.txt 2>&1; head -14 $W/steps_olmo2_1B_$v.txt; gzip -f $W/tl_olmo2_1B_$v.csv
done
echo "end at $(el)s"
