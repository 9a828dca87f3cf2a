#!/usr/bin/env bash
# session 25, call 3: the tree with down_proj's gated input taken out again (swiglu_value kept): its skinny, SwiGLU,
# decoding-step and persistent tests; then the plain skinny kernel's register budget: "base" (__launch_bounds__(256),
# ptxas gives the one-tile kernel 64 registers, four CTAs an SM) against "lb1" (__launch_bounds__(256, 1): 128, its 24
# loads a lane in flight at once, two CTAs an SM), OLMo2 190M and 1B at batch 1 and 8, context 128 and 4096, three
# rounds of alternating order; CUPTI timelines of lb1 at batch 1, context 128.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c11; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c11.tar.gz c11); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_base
cp kernels/matmul/skinny_matmul.cu /tmp/sk.cu
python3 - <<'PY'
p = 'kernels/matmul/skinny_matmul.cu'; s = open(p).read()
old = '__global__ void __launch_bounds__(cta_threads(kGated))\n'
assert s.count(old) == 1
open(p, 'w').write(s.replace(old, '__global__ void __launch_bounds__(cta_threads(kGated), 1)\n'))
PY
cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_lb1
cp /tmp/sk.cu kernels/matmul/skinny_matmul.cu
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 120 build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*Swiglu*:*DecodeStep*:*PersistentDecode*' > $W/gpu_tests.log 2>&1
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
b() {  # size variant round
  [ $(left) -lt 90 ] && return
  timeout 40 /tmp/bench_$2 hf:$W/m/$1-hf --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then b $size base $r; b $size lb1 $r; else b $size lb1 $r; b $size base $r; fi
done; done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for size in olmo2_190M olmo2_1B; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_base_1.txt \
  $W/tokens_${size}_lb1_1.txt --names base lb1 --label $size >> $W/agreement.txt; done; cat $W/agreement.txt
echo "bench at $(el)s"
for size in olmo2_190M olmo2_1B; do
  [ $(left) -lt 30 ] && break
  for v in lb1 base; do
    CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_${size}_$v.csv timeout 25 \
      /tmp/bench_$v hf:$W/m/$size-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
    python3 bench/timeline/gaps.py $W/tl_${size}_$v.csv --decode-steps 12 --launches > $W/launches_${size}_$v.txt 2>&1
    rm -f $W/tl_${size}_$v.csv
  done
done
head -16 $W/launches_*.txt; echo "end at $(el)s"
