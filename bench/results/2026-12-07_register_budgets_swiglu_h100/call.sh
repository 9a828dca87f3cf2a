#!/usr/bin/env bash
# session 26, call 1: build at HEAD; the GPU suite's decoding tests; then two register budgets, each against "base"
# (the defaults), OLMo2 190M and 1B at batch 1 and 8, context 128, three rounds of changing order:
# - "step2": the launch that begins with the residual step (q/k/v and gate/up at batch 1) held to two CTAs an SM (128
#   registers) instead of four (64);
# - "swiglu" / "swiglu128": SwiGLU in gate/up's launch (FATHOM_SWIGLU_PROJECTION=fused) at ptxas' default (58
#   registers at 512 threads) and held to one CTA an SM (128).
# On an H200, afterwards: the default path at batch 1 and context 4096 for both models.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c15; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c15.tar.gz c15); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_base
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 100 build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*DecodeStep*:*Generat*' > $W/gpu_tests.log 2>&1
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
cp kernels/matmul/skinny_matmul.cu /tmp/sk.cu
variant() {  # name old new
  python3 - "$2" "$3" <<'PY'
import sys
p = 'kernels/matmul/skinny_matmul.cu'; s = open(p).read()
assert s.count(sys.argv[1]) == 1, sys.argv[1]
open(p, 'w').write(s.replace(sys.argv[1], sys.argv[2]))
PY
  cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_$1
  cp /tmp/sk.cu kernels/matmul/skinny_matmul.cu
}
variant step2 $'__launch_bounds__(kThreads, 4)\n    skinny_matmul_step_kernel' $'__launch_bounds__(kThreads, 2)\n    skinny_matmul_step_kernel'
variant swiglu128 $'__launch_bounds__(cta_threads(kGated))\n' $'__launch_bounds__(cta_threads(kGated), kGated ? 1 : 0)\n'
ls -la /tmp/bench_*
echo "models and variants at $(el)s"
b() {  # size variant round
  [ $(left) -lt 60 ] && return
  local bin=/tmp/bench_base env=separate
  [ $2 = step2 ] && bin=/tmp/bench_step2
  [ $2 = swiglu ] && env=fused
  [ $2 = swiglu128 ] && env=fused bin=/tmp/bench_swiglu128
  FATHOM_SWIGLU_PROJECTION=$env timeout 30 $bin hf:$W/m/$1-hf --context 128 --batch 1,8 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then order="base step2 swiglu swiglu128"; else order="swiglu128 swiglu step2 base"; fi
  for v in $order; do b $size $v $r; done
done; done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for size in olmo2_190M olmo2_1B; do for v in step2 swiglu swiglu128; do python3 bench/compare_generate_tokens.py \
  $W/tokens_${size}_base_1.txt $W/tokens_${size}_${v}_1.txt --names base $v --label $size >> $W/agreement.txt; done; done
cat $W/agreement.txt
echo "bench at $(el)s"
if grep -q H200 $W/device.txt; then for size in olmo2_190M olmo2_1B; do
  [ $(left) -lt 40 ] && break
  timeout 30 /tmp/bench_base hf:$W/m/$size-hf --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size default" 2> /dev/null | tee -a $W/h200_default.md
done; fi
echo "end at $(el)s"
