#!/usr/bin/env bash
# session 25, call 2: down_proj gating its own input (FATHOM_SWIGLU_IN_DOWN_PROJ, skinny_matmul_of_swiglu), never run
# on a GPU: its kernel test and the decoding tests first, then fused against separate at batch 1 and 8, context 128 and
# 4096, OLMo2 190M and 1B, three rounds of alternating order (bench/compare_rounds.py), token agreement; the SASS of
# the one-tile skinny kernels (loads in flight); a CUPTI timeline of the 190M with it fused; then the rest of the suite.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c10; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c10.tar.gz c10); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
FIRST='*Skinny*:*DecodeStep*:*Swiglu*:*Generat*:*DecodeAttention*'
timeout 150 build/tests/fathom_gpu_tests --gtest_filter="$FIRST" > $W/gpu_first.log 2>&1
echo "first tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_first.log
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
b() {  # size choice round
  [ $(left) -lt 200 ] && return
  FATHOM_SWIGLU_IN_DOWN_PROJ=$2 timeout 40 build/bench/bench_generate hf:$W/m/$1-hf --context 128,4096 --batch 1,8 \
    --new-tokens 40 --repeats 3 --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do for size in olmo2_190M olmo2_1B; do
  if [ $((r % 2)) = 1 ]; then b $size separate $r; b $size fused $r; else b $size fused $r; b $size separate $r; fi
done; done
python3 bench/compare_rounds.py $W/generate.md --baseline separate | tee $W/changes.md
for size in olmo2_190M olmo2_1B; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_separate_1.txt \
  $W/tokens_${size}_fused_1.txt --names separate fused --label $size >> $W/agreement.txt; done; cat $W/agreement.txt
echo "bench at $(el)s"
LIB=build/bench/bench_generate
if [ -n "$LIB" ]; then
  timeout 60 cuobjdump -sass "$LIB" 2>/dev/null | awk '/Function : .*skinny_matmul_kernelILi1ELb1E13__nv_bfloat16Lb0ELb[01]ELNS1_5InputE[03]/{p=1} /Function : /&&!/skinny_matmul_kernelILi1ELb1E13__nv_bfloat16Lb0ELb[01]ELNS1_5InputE[03]/{p=0} p' | gzip > $W/sass_skinny_1tile.txt.gz
fi
CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_190M.csv FATHOM_SWIGLU_IN_DOWN_PROJ=fused timeout 40 \
  build/bench/bench_generate hf:$W/m/olmo2_190M-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
python3 bench/timeline/gaps.py $W/tl_190M.csv --decode-steps 12 --launches > $W/launches_190M_fused.txt 2>&1; gzip -f $W/tl_190M.csv
head -20 $W/launches_190M_fused.txt; echo "timeline at $(el)s"
if [ $(left) -gt 150 ]; then
  timeout $(( $(left) - 15 )) build/tests/fathom_gpu_tests --gtest_filter="-$FIRST" > $W/gpu_rest.log 2>&1
  echo "rest rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|^\[ RUN' $W/gpu_rest.log | tail -3
fi
echo "end at $(el)s"
