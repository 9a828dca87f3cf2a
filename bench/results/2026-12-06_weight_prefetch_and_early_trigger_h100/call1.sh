#!/usr/bin/env bash
# The first run: build the tree (build/) and the early-trigger variant (build_early/); decoding GPU tests on
# both; A/B grid of {trigger after wait, before wait} x {prefetch first step, whole rows, whole rows + W in
# registers} on olmo2_1B, olmo2_190M, llama3_1B at context 128/4096, batch 1/8; batch-1 timelines; the rest of
# the suite until DEADLINE seconds. Results are packed into $OUT; .debs/ held PCRE2's packages, which the
# benchmark machine lacked.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-570}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/s1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='s1/m/*-hf' --exclude='s1/m/*/checkpoints' -czf $OUT/s1.tar.gz s1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?} + experiment hooks" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16; } > $W/build.log 2>&1 || { tail -40 $W/build.log; exit 1; }
echo "built at $(el)s"
( { cmake -S . -B build_early -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON -DCMAKE_CUDA_FLAGS=-DFATHOM_EXPERIMENT_EARLY_TRIGGER && cmake --build build_early -j12 --target bench_generate fathom_gpu_tests; } > $W/build_early.log 2>&1; echo "early build rc=$? at $(el)s" ) &
early=$!
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
DEC='*Skinny*:*Decod*:*Generat*:*Graph*:*RmsNorm*:*Swiglu*:*Elementwise*:*Argmax*:*Sampl*:*DependentLaunch*'
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
build/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_tests.log 2>&1
echo "decoding gpu tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests.log | head -30
wait $early
FATHOM_EXPERIMENT_PREFETCH_ROWS=1 FATHOM_EXPERIMENT_EARLY_W=1 LD_LIBRARY_PATH=$PWD/build_early/lib:/usr/local/cuda/lib64 build_early/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_tests_early.log 2>&1
echo "early decoding gpu tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests_early.log | head -30
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
for size in olmo2_1B olmo2_190M llama3_1B; do
  [ -d $W/m/$size-hf ] || { echo "no $size model"; tail -3 $W/m/train_$size.log; continue; }
  for b in build build_early; do
    for pf in step rows rows+w; do
      [ $(left) -lt 90 ] && break 3
      env_pf="FATHOM_X=1"; [ $pf = rows ] && env_pf="FATHOM_EXPERIMENT_PREFETCH_ROWS=1"
      [ $pf = rows+w ] && env_pf="FATHOM_EXPERIMENT_PREFETCH_ROWS=1 FATHOM_EXPERIMENT_EARLY_W=1"
      v=${b#build}; v=${v:-_wait}
      env $env_pf LD_LIBRARY_PATH=$PWD/$b/lib:/usr/local/cuda/lib64 timeout 60 $b/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 4 \
        --label "$size trigger$v prefetch_$pf" --tokens-out $W/tokens_${size}${v}_$pf.txt 2> $W/gen_${size}${v}_$pf.err | tee -a $W/generate.md
    done
  done
  for f in $W/tokens_${size}_*; do [ $f = $W/tokens_${size}_wait_step.txt ] || python3 bench/compare_generate_tokens.py $W/tokens_${size}_wait_step.txt $f --names base $(basename $f .txt) --label $size --min-tokens 32 >> $W/agreement.txt; done
  echo "$size rows at $(el)s"
done
for b in build build_early; do
  [ $(left) -lt 60 ] && break
  v=${b#build}; v=${v:-_wait}
  FATHOM_EXPERIMENT_PREFETCH_ROWS=1 FATHOM_EXPERIMENT_EARLY_W=1 CUDA_INJECTION64_PATH=$PWD/build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_1B$v.csv LD_LIBRARY_PATH=$PWD/$b/lib:/usr/local/cuda/lib64 \
    $b/bench/bench_generate hf:$W/m/olmo2_1B-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_1B$v.csv --decode-steps 12 > $W/steps_1B$v.txt 2>&1; head -30 $W/steps_1B$v.txt; gzip -f $W/tl_1B$v.csv
done
t=$(( $(left) - 8 ))
if [ $t -gt 30 ]; then
  timeout $t build/tests/fathom_gpu_tests --gtest_filter="-$DEC" > $W/gpu_rest.log 2>&1
  echo "rest of the gpu suite rc=$? at $(el)s"; grep -E '^\[  PASSED|^\[  FAILED' $W/gpu_rest.log | head -20; grep -c '^\[       OK' $W/gpu_rest.log
fi
echo "end at $(el)s"
