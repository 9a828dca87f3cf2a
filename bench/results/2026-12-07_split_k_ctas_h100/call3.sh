#!/usr/bin/env bash
# session 24, call 3: auto v2 (two chunks a warp: the 190M's down_proj split, its o_proj not) against auto v1 (both
# split; skinny_matmul.cpp of 8bb7da9) and off, 190M, three rounds of rotating order, with token checks; the skinny
# and decoding-step GPU tests at v2; a CUPTI timeline of v2; on an H200 the README's rows.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c6; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c6.tar.gz c6); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_v2
cp kernels/matmul/skinny_matmul.cpp /tmp/skinny_v2.cpp; cp .devrun/skinny_matmul_split_v1.cpp kernels/matmul/skinny_matmul.cpp
cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_v1
cp /tmp/skinny_v2.cpp kernels/matmul/skinny_matmul.cpp
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 100 build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*DecodeStep*:*Generat*' > $W/gpu_first.log 2>&1
echo "tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_first.log
mkdir -p $W/m
size=olmo2_190M
cat > $W/m/$size.yaml <<YAML
name: tl-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
echo "model at $(el)s"
bench() {  # variant round
  [ $(left) -lt 40 ] && return
  local bin=/tmp/bench_v2 choice=auto
  case $1 in v1) bin=/tmp/bench_v1 ;; off) choice=off ;; esac
  FATHOM_SKINNY_SPLIT_K_CTAS=$choice timeout 40 $bin hf:$W/m/$size-hf --context 128,4096 --batch 1,8 \
    --new-tokens 40 --repeats 3 --label "$size $1 r$2" --tokens-out $W/tokens_$1_$2.txt 2> /dev/null | tee -a $W/split.md
}
for v in off v1 v2; do bench $v 1; done
for v in v2 off v1; do bench $v 2; done
for v in v1 v2 off; do bench $v 3; done
for v in v1 v2; do python3 bench/compare_generate_tokens.py $W/tokens_off_1.txt $W/tokens_${v}_1.txt --names off $v --label $size >> $W/agreement.txt; done
cat $W/agreement.txt; echo "sweep at $(el)s"
CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_v2.csv timeout 40 \
  /tmp/bench_v2 hf:$W/m/$size-hf --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 1 > /dev/null 2>&1
python3 bench/timeline/gaps.py $W/tl_v2.csv --decode-steps 12 --launches > $W/launches_v2.txt 2>&1; gzip -f $W/tl_v2.csv
cat $W/launches_v2.txt | head -20; echo "timeline at $(el)s"
if grep -q H200 $W/device.txt && [ $(left) -gt 200 ]; then
  PEERS=gpt-fast LEVERS=skinny+fused+dependent+inside+cluster+splitk BATCHES=1 \
    timeout $(( $(left) - 10 )) scripts/bench_generate_device.sh build $W/llama llama3_1B > $W/llama_script.log 2>&1
  echo "llama rows rc=$? at $(el)s"; grep '^|' $W/llama/generate.md | tail -14; cat $W/llama/agreement.txt 2>/dev/null
fi
echo "end at $(el)s"
