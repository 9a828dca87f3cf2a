#!/usr/bin/env bash
# session 25, call 1 (prepared in session 24): build at HEAD; the GPU tests edited in session 24 and never run
# (TheClusterMergeGivesTheCombineKernelsBits' batch-24 case, SwigluOfTheProductsBitForBit's pin) and the decoding
# ones; then the cluster merge's block limit (landed unmeasured beyond the Llama shape): OLMo2 190M and 1B at batch 32,
# context 128, the limit as landed ("limit") against a second bench_generate built without it ("nolimit"), three rounds,
# read with bench/compare_rounds.py; then branch attention-sums-at-once (.devrun/decode_attention_sums.cu and
# decode_prologue_sums.cuh: the prologue's sums of squares loaded two parts at once) built beside it: its attention GPU
# tests, and batch 1 against the landed build ("sums" vs "limit"), three rounds; on an H200 the README's Llama rows.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c9; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c9.tar.gz c9); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_limit
cp kernels/attention/decode_attention.cpp /tmp/da.cpp
python3 - <<'PY'
p = 'kernels/attention/decode_attention.cpp'; s = open(p).read()
assert s.count(' &&\n         split_blocks <= sm_count;') == 1
open(p, 'w').write(s.replace(' &&\n         split_blocks <= sm_count;', ' && split_blocks >= 0 && sm_count >= 0;'))
PY
cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_nolimit
cp /tmp/da.cpp kernels/attention/decode_attention.cpp
cp build/tests/fathom_gpu_tests /tmp/gpu_tests_main
cp kernels/attention/decode_attention.cu /tmp/da.cu; cp kernels/attention/decode_prologue.cuh /tmp/dp.cuh
cp .devrun/decode_attention_sums.cu kernels/attention/decode_attention.cu
cp .devrun/decode_prologue_sums.cuh kernels/attention/decode_prologue.cuh
cmake --build build -j16 --target bench_generate fathom_gpu_tests >> $W/build.log 2>&1 && \
  cp build/bench/bench_generate /tmp/bench_sums && cp build/tests/fathom_gpu_tests /tmp/gpu_tests_sums
cp /tmp/da.cu kernels/attention/decode_attention.cu; cp /tmp/dp.cuh kernels/attention/decode_prologue.cuh
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 120 /tmp/gpu_tests_main --gtest_filter='*Skinny*:*DecodeAttention*:*DecodeStep*' > $W/gpu_tests.log 2>&1
echo "tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests.log
timeout 90 /tmp/gpu_tests_sums --gtest_filter='*DecodeAttention*:*DecodePrologue*:*DecodeStep*' > $W/gpu_tests_sums.log 2>&1
echo "sums tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests_sums.log
for size in olmo2_190M olmo2_1B; do
  cat > $W/m/$size.yaml <<YAML
name: c-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
    build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done
echo "models at $(el)s"
b() {  # size variant round
  [ $(left) -lt 40 ] && return
  timeout 40 /tmp/bench_$2 hf:$W/m/$1-hf --context 128 --batch 8,32 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/limit.md
}
for r in 1 2 3; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then b $size limit $r; b $size nolimit $r; else b $size nolimit $r; b $size limit $r; fi
done; done
python3 bench/compare_rounds.py $W/limit.md --baseline nolimit | tee $W/limit_changes.md
for size in olmo2_190M olmo2_1B; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_nolimit_1.txt \
  $W/tokens_${size}_limit_1.txt --names nolimit limit --label $size >> $W/agreement.txt; done; cat $W/agreement.txt
echo "limit at $(el)s"
s() {  # size variant round
  [ $(left) -lt 40 ] && return
  timeout 40 /tmp/bench_$2 hf:$W/m/$1-hf --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/stokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/sums.md
}
for r in 1 2 3; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then s $size limit $r; s $size sums $r; else s $size sums $r; s $size limit $r; fi
done; done
python3 bench/compare_rounds.py $W/sums.md --baseline limit | tee $W/sums_changes.md
for size in olmo2_190M olmo2_1B; do python3 bench/compare_generate_tokens.py $W/stokens_${size}_limit_1.txt \
  $W/stokens_${size}_sums_1.txt --names limit sums --label $size >> $W/agreement.txt; done; tail -4 $W/agreement.txt
echo "sums at $(el)s"
if grep -q H200 $W/device.txt && [ $(left) -gt 240 ]; then
  PEERS=gpt-fast LEVERS=skinny+fused+dependent+inside+cluster+splitk BATCHES=1,8 \
    timeout $(( $(left) - 10 )) scripts/bench_generate_device.sh build $W/llama llama3_1B > $W/llama_script.log 2>&1
  echo "llama rows rc=$? at $(el)s"; grep '^|' $W/llama/generate.md | tail -8; cat $W/llama/agreement.txt 2>/dev/null
fi
echo "end at $(el)s"
