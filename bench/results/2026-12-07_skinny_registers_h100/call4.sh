#!/usr/bin/env bash
# session 25, call 4: skinny_matmul_deep_kernel (one-weight, one-tile launches held to one CTA an SM, 128 registers)
# as landed, never run: the skinny and decoding-step GPU tests, then "deep" (HEAD) against "base" (the same tree with
# those launches back on the plain kernel), OLMo2 190M and 1B at batch 1 and 8, context 128, rounds of alternating
# order until the deadline.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-360}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c12; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c12.tar.gz c12); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_deep
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 90 build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*DecodeStep*' > $W/gpu_tests.log 2>&1
echo "tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests.log
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
cp kernels/matmul/skinny_matmul.cu /tmp/sk.cu
python3 - <<'PY'
p = 'kernels/matmul/skinny_matmul.cu'; s = open(p).read()
old = 'run(skinny_matmul_deep_kernel<Out>, kThreads);'
assert s.count(old) == 1
open(p, 'w').write(s.replace(old, 'run(skinny_matmul_kernel<kTiles, true, Out>, kThreads);'))
PY
cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_base
cp /tmp/sk.cu kernels/matmul/skinny_matmul.cu
echo "base built at $(el)s"
b() {  # size variant round
  [ $(left) -lt 25 ] && return
  timeout 25 /tmp/bench_$2 hf:$W/m/$1-hf --context 128 --batch 1,8 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3 4; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then b $size base $r; b $size deep $r; else b $size deep $r; b $size base $r; fi
done; done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for size in olmo2_190M olmo2_1B; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_base_1.txt \
  $W/tokens_${size}_deep_1.txt --names base deep --label $size >> $W/agreement.txt; done; cat $W/agreement.txt
echo "end at $(el)s"
