#!/usr/bin/env bash
# session 27, call 3: where the few-rows decode attention lets the next grid (o_proj) launch: at its start after the
# wait ("base", main), after its loop over the cache ("trig_loop", the tree; GPU tests), or at its exit ("trig_end");
# and the skinny GEMM without its L2 prefetch before the wait ("nopf"). OLMo2 1B and 190M, batch 1, context 128 and
# 4096, three rounds of changing order; CUPTI timelines of the 1B at context 128, base and trig_loop, where time is left.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c20; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c20.tar.gz c20); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
A=kernels/attention/decode_attention.cu; S=kernels/matmul/skinny_matmul.cu
cp $A /tmp/a0.cu; cp $S /tmp/s0.cu
python3 bench/results/2026-12-07_attention_trigger_h100/variants.py trig_loop || exit 1
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests fathom_timeline; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
cp build/bench/bench_generate /tmp/bench_trig_loop
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "built at $(el)s"
timeout 100 build/tests/fathom_gpu_tests --gtest_filter='*DecodeAttention*:*DecodeStep*:*Generat*:*DependentLaunch*' > $W/gpu_tests.log 2>&1
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
for v in trig_end nopf base; do
  cp /tmp/a0.cu $A; cp /tmp/s0.cu $S
  [ $v != base ] && python3 bench/results/2026-12-07_attention_trigger_h100/variants.py $v
  cmake --build build -j16 --target bench_generate >> $W/build.log 2>&1 && cp build/bench/bench_generate /tmp/bench_$v
done
cp /tmp/a0.cu $A; cp /tmp/s0.cu $S
ls -la /tmp/bench_*
echo "models and variants at $(el)s"
b() {  # size variant round
  [ $(left) -lt 30 ] && return
  timeout 40 /tmp/bench_$2 hf:$W/m/$1-hf --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$1 $2 r$3" --tokens-out $W/tokens_$1_$2_$3.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do for size in olmo2_1B olmo2_190M; do
  if [ $((r % 2)) = 1 ]; then order="base trig_loop trig_end nopf"; else order="nopf trig_end trig_loop base"; fi
  for v in $order; do b $size $v $r; done
done; done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for size in olmo2_190M olmo2_1B; do for v in trig_loop trig_end nopf; do [ -f $W/tokens_${size}_${v}_1.txt ] && \
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_base_1.txt $W/tokens_${size}_${v}_1.txt --names base $v \
  --label $size >> $W/agreement.txt; done; done
cat $W/agreement.txt
echo "bench at $(el)s"
for v in base trig_loop; do
  [ $(left) -lt 25 ] && break
  CUDA_INJECTION64_PATH=build/bench/libfathom_timeline.so FATHOM_TIMELINE=$W/tl_$v.csv timeout 20 /tmp/bench_$v \
    hf:$W/m/olmo2_1B-hf --context 128 --batch 1 --new-tokens 40 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/gaps.py $W/tl_$v.csv --decode-steps 12 --launches > $W/launches_1B_$v.txt 2>&1
  rm -f $W/tl_$v.csv; head -30 $W/launches_1B_$v.txt
done
echo "end at $(el)s"
