#!/usr/bin/env bash
# session 27, call 1: the early-copies kernel (branch attention-early-copies, .devrun/decode_attention_early.cu) against main's ("base").
# reading its count and copying its split's first keys and values into shared memory before its grid wait ("early",
# the tree) against the kernel before it ("base"); GPU tests of the tree first. OLMo2 190M and 1B and the
# Llama-3.2-1B shape (GQA 32/8: four rows a KV head), batch 1, context 128 and 4096, three rounds of changing order;
# then CUPTI timelines of the 1B, batch 1, context 128, base and early, where time is left.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c17; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c17.tar.gz c17); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
git apply bench/results/2026-12-07_attention_early_copies_h100/early.patch  # "early": the kernel of commit 849e5ad
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_early
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 150 build/tests/fathom_gpu_tests --gtest_filter='*DecodeAttention*:*DecodePrologue*:*DecodeStep*:*Generat*:*Moda*Decode*:*Ragged*' > $W/gpu_tests.log 2>&1
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
F=kernels/attention/decode_attention.cu
cp $F /tmp/da.cu
git show a9c7501:kernels/attention/decode_attention.cu > $F  # "base"
cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_base
cp /tmp/da.cu $F
ls -la /tmp/bench_*
echo "models and variants at $(el)s"
b() {  # size variant round
  [ $(left) -lt 30 ] && return
  timeout 40 /tmp/bench_$2 hf:$W/m/$1-hf --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then order="base early"; else order="early base"; fi
  for v in $order; do b $size $v $r; done
done
  if [ $((r % 2)) = 1 ]; then order="base early"; else order="early base"; fi
  for v in $order; do b llama3_1B $v $r; done
done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for size in olmo2_190M olmo2_1B llama3_1B; do for v in early; do [ -f $W/tokens_${size}_${v}_1.txt ] && \
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_base_1.txt $W/tokens_${size}_${v}_1.txt --names base $v \
  --label $size >> $W/agreement.txt; done; done
cat $W/agreement.txt
echo "bench at $(el)s"
for v in base early; do
  [ $(left) -lt 40 ] && break
  CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_$v.csv timeout 30 /tmp/bench_$v \
    hf:$W/m/olmo2_1B-hf --context 128 --batch 1 --new-tokens 40 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_$v.csv --decode-steps 12 --launches > $W/launches_1B_$v.txt 2>&1
  rm -f $W/tl_$v.csv; head -30 $W/launches_1B_$v.txt
done
echo "end at $(el)s"
