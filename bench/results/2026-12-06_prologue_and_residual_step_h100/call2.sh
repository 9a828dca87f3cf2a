#!/usr/bin/env bash
# session 13, call 2: build; the decoding GPU tests with the two new launches; A/B of the decode prologue inside
# attention (P) and the residual step inside the MLP's gate/up launch (R) on olmo2_1B, olmo2_190M, llama3_1B;
# the base and P+R again; a batch-1 timeline of each; gpt-fast on olmo2_190M in the time left.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-575}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c2; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c2/m/*-hf' --exclude='c2/m/*/checkpoints' -czf $OUT/c2.tar.gz c2); }
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
DEC='*Skinny*:*Decod*:*Generat*:*Graph*:*RmsNorm*:*Swiglu*:*Elementwise*:*Argmax*:*Sampl*:*DependentLaunch*:*Prologue*'
build/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_tests.log 2>&1
echo "decoding gpu tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|InsideAttention|ResidualStep|AfterAResidual' $W/gpu_tests.log | head -40
grep -B3 -A12 "Failure" $W/gpu_tests.log | head -60
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
variant_env() {
  case $1 in
    base) echo "FATHOM_PROLOGUE_IN_ATTENTION=separate FATHOM_RESIDUAL_STEP_IN_GEMM=separate" ;;
    P) echo "FATHOM_PROLOGUE_IN_ATTENTION=fused FATHOM_RESIDUAL_STEP_IN_GEMM=separate" ;;
    R) echo "FATHOM_PROLOGUE_IN_ATTENTION=separate FATHOM_RESIDUAL_STEP_IN_GEMM=fused" ;;
    PR) echo "FATHOM_PROLOGUE_IN_ATTENTION=fused FATHOM_RESIDUAL_STEP_IN_GEMM=fused" ;;
  esac
}
for size in olmo2_1B olmo2_190M llama3_1B; do
  [ -d $W/m/$size-hf ] || { echo "no $size model"; tail -3 $W/m/train_$size.log; continue; }
  for v in base P R PR; do
    [ $(left) -lt 60 ] && break 2
    env $(variant_env $v) timeout 60 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 4 \
      --label "$size $v" --tokens-out $W/tokens_${size}_$v.txt 2> $W/gen_${size}_$v.err | tee -a $W/generate.md
  done
  for v in P R PR; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_base.txt $W/tokens_${size}_$v.txt --names base $v --label $size --min-tokens 32 >> $W/agreement.txt; done
  echo "$size rows at $(el)s"
done
cat $W/agreement.txt
for size in olmo2_1B olmo2_190M llama3_1B; do
  for v in base PR; do
    [ $(left) -lt 40 ] && break 2
    env $(variant_env $v) timeout 30 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --repeats 4 \
      --label "$size $v again" 2>/dev/null | tee -a $W/generate.md
  done
done
for size in olmo2_1B olmo2_190M; do
  for v in base PR; do
    [ $(left) -lt 40 ] && break 2
    env $(variant_env $v) CUDA_INJECTION64_PATH=$PWD/build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_${size}_$v.csv \
      timeout 30 build/bench/bench_generate hf:$W/m/$size-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
    python3 bench/timeline/gaps.py $W/tl_${size}_$v.csv --decode-steps 12 > $W/steps_${size}_$v.txt 2>&1; head -14 $W/steps_${size}_$v.txt; gzip -f $W/tl_${size}_$v.csv
  done
done
echo "timelines at $(el)s"
t=$(( $(left) - 10 ))
if [ $t -gt 100 ] && [ -f .ref/gpt-fast.tar.gz ]; then
  mkdir -p /tmp/gf && tar -xzf .ref/gpt-fast.tar.gz -C /tmp/gf
  env $(variant_env base) timeout 60 build/bench/bench_generate hf:$W/m/olmo2_190M-hf --ids $W/ids.txt --context 128 --batch 1,8,32 --new-tokens 40 --repeats 4 \
    --label "olmo2_190M base" --tokens-out $W/tokens_f190.txt 2>/dev/null | tee -a $W/peers.md
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor timeout $(( $(left) - 8 )) python3 bench/gpt_fast_reference.py $W/m/olmo2_190M-hf --gpt-fast /tmp/gf/gpt-fast \
    --ids $W/ids.txt --context 128 --batch 1,8,32 --new-tokens 40 --label olmo2_190M --repeats 3 --tuning off --tokens-out $W/tokens_g190.txt 2> $W/gptfast190.err | tee -a $W/peers.md
  python3 bench/compare_generate_tokens.py $W/tokens_f190.txt $W/tokens_g190.txt --names fathom gpt-fast --label olmo2_190M --min-tokens 32 | tee -a $W/agreement.txt
fi
echo "end at $(el)s"
