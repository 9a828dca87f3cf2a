#!/usr/bin/env bash
# session 28, call 1 (prepared in session 27): the defaults of 0de074c+ (decode attention's trigger after its loop,
# FATHOM_SKINNY_L2_PREFETCH=auto: no 1B or Llama launch prefetches) against FATHOM_SKINNY_L2_PREFETCH=always ("always",
# the prefetch of every launch, as before the rule) and against FATHOM_SWIGLU_PROJECTION=fused ("swiglu": SwiGLU in
# gate/up's launch, 4% slower at 1B while every launch prefetched, cause open). GPU tests of the tree first (the
# always/never loop of GpuSkinnyMatmul.GemmsFeedingGemms... has not run). OLMo2 190M and 1B and the Llama-3.2-1B shape,
# batch 1 and 8, context 128 and 4096, three rounds of changing order. All variants are environment variables of one
# build. Run as FATHOM_COMMIT=<sha> DEADLINE=<s> bash .devrun/s28c1.sh with carry [".devrun", ".debs"].
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c23; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c23.tar.gz c23); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "built at $(el)s"
timeout 120 build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*DecodeAttention*:*DecodeStep*:*Generat*' > $W/gpu_tests.log 2>&1
echo "tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests.log
for size in olmo2_190M olmo2_1B llama3_1B; do
  model="{size: $size}"
  [ $size = llama3_1B ] && model="{d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256, norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000, rope_scaling: {type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}}"
  cat > $W/m/$size.yaml <<YAML
name: c-$size
model: $model
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
    build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done
echo "models at $(el)s"
variant_env() {
  case $1 in
    base) echo "FATHOM_SKINNY_L2_PREFETCH=auto" ;;
    always) echo "FATHOM_SKINNY_L2_PREFETCH=always" ;;
    swiglu) echo "FATHOM_SWIGLU_PROJECTION=fused" ;;
  esac
}
b() {  # size variant round
  [ $(left) -lt 30 ] && return
  env $(variant_env $2) timeout 40 build/bench/bench_generate hf:$W/m/$1-hf --context 128,4096 --batch 1,8 \
    --new-tokens 40 --repeats 3 --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do
  for size in olmo2_1B olmo2_190M; do
    if [ $((r % 2)) = 1 ]; then order="base always swiglu"; else order="swiglu always base"; fi
    for v in $order; do b $size $v $r; done
  done
  if [ $((r % 2)) = 1 ]; then order="base always"; else order="always base"; fi
  for v in $order; do b llama3_1B $v $r; done
done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for size in olmo2_190M olmo2_1B llama3_1B; do for v in always swiglu; do [ -f $W/tokens_${size}_${v}_1.txt ] && \
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_base_1.txt $W/tokens_${size}_${v}_1.txt --names base $v \
  --label $size >> $W/agreement.txt; done; done
cat $W/agreement.txt
echo "end at $(el)s"
