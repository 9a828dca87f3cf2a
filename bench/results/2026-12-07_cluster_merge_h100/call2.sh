#!/usr/bin/env bash
# session 21, call 2: build; the decoding GPU tests after the review's changes to the cluster merge (now the
# default); the default path (fathom alone) on olmo2_1B, olmo2_190M and llama3_1B, batch 1, context 128 and 4096,
# two rounds; a CUPTI timeline of the 1B.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c2; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c2/m/*-hf' --exclude='c2/m/*/checkpoints' -czf $OUT/c2.tar.gz c2); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_190M olmo2_1B llama3_1B; do
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
DEC='*DecodeAttention*:*DecodeStep*:*DecodePrologue*:*DependentLaunch*:*ResidualStep*:*Generat*'
timeout 120 build/tests/fathom_gpu_tests --gtest_filter="$DEC" > $W/gpu_decoding.log 2>&1
echo "decoding tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_decoding.log
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
for r in 1 2; do
  for size in olmo2_1B olmo2_190M llama3_1B; do
    [ $(left) -lt 40 ] && break
    [ -d $W/m/$size-hf ] || continue
    timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
      --label "$size default r$r" --tokens-out $W/tokens_${size}_$r.txt 2> /dev/null | tee -a $W/generate.md
  done
done
if [ $(left) -gt 40 ]; then
  CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_olmo2_1B.csv \
    timeout 25 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_olmo2_1B.csv --decode-steps 12 > $W/timelines.txt 2>&1; gzip -f $W/tl_olmo2_1B.csv; cat $W/timelines.txt
fi
echo "end at $(el)s"
