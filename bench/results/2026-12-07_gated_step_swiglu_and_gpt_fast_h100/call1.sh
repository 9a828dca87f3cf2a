#!/usr/bin/env bash
# session 30, call 1: build at HEAD; the GPU tests of the code no GPU has run yet (the gated residual step in the
# gate/up launch, the add_rms_norm one-pass rule, the pre-norm fallback, the decode-step tests with randomised norm
# gains) first; then the default decoding path against FATHOM_SWIGLU_PROJECTION=fused on olmo2_190M, olmo2_1B and
# the Llama-3.2-1B shape, batch 1/8/32 x context 128/4096, three rounds of alternating order (compare_rounds.py),
# token agreement; batch-1 CUPTI timelines of the default path; then the rest of the GPU suite until DEADLINE.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c30a; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c30a.tar.gz c30a); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
FIRST='*Skinny*:*DecodeStep*:*RmsNorm*:*AddRms*'
timeout 180 build/tests/fathom_gpu_tests --gtest_filter="$FIRST" > $W/gpu_first.log 2>&1
echo "first tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_first.log
model_yaml() {
  case $1 in
    llama3_1B) echo "{d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256, norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000, rope_scaling: {type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}}" ;;
    *) echo "{size: $1}" ;;
  esac
}
SIZES="olmo2_190M olmo2_1B llama3_1B"
for size in $SIZES; do
  cat > $W/m/$size.yaml <<YAML
name: c-$size
model: $(model_yaml $size)
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 10, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 2}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
    build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done
echo "models at $(el)s"
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
b() {  # size choice round
  [ $(left) -lt 170 ] && return
  FATHOM_SWIGLU_PROJECTION=$2 timeout 60 build/bench/bench_generate hf:$W/m/$1-hf --ids $W/ids.txt --context 128,4096 \
    --batch 1,8,32 --new-tokens 40 --repeats 3 --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> $W/err_$1_$2_$3.txt | tee -a $W/generate.md
}
for r in 1 2 3; do for size in $SIZES; do
  if [ $((r % 2)) = 1 ]; then b $size separate $r; b $size fused $r; else b $size fused $r; b $size separate $r; fi
done; done
python3 bench/compare_rounds.py $W/generate.md --baseline separate | tee $W/changes.md
for size in $SIZES; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_separate_1.txt \
  $W/tokens_${size}_fused_1.txt --names separate fused --label $size --min-tokens 32 >> $W/agreement.txt; done; cat $W/agreement.txt
echo "bench at $(el)s"
for size in olmo2_190M olmo2_1B; do
  [ $(left) -lt 120 ] && break
  CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_$size.csv timeout 40 \
    build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_$size.csv --decode-steps 12 --launches > $W/launches_$size.txt 2>&1; gzip -f $W/tl_$size.csv
  head -30 $W/launches_$size.txt
done
echo "timelines at $(el)s"
if [ $(left) -gt 100 ]; then
  timeout $(( $(left) - 15 )) build/tests/fathom_gpu_tests --gtest_filter="-$FIRST" > $W/gpu_rest.log 2>&1
  echo "rest rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|^\[ RUN' $W/gpu_rest.log | tail -3
  grep -E '^\[ RUN|^\[       OK' $W/gpu_rest.log | tail -1 > $W/gpu_rest_last.txt
fi
echo "end at $(el)s"
