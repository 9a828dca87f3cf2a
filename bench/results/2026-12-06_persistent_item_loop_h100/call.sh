#!/usr/bin/env bash
# session 17, call 1: build (all); the persistent tests; olmo2_1B and olmo2_190M (3 training steps); persistent
# off/on at batch 1, context 128 and 4096, two rounds; traces; ncu of the persistent kernel (1B); the whole GPU
# suite in the time left.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-570}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c1/m/*-hf' --exclude='c1/m/*/checkpoints' --exclude='*.ncu-rep' -czf $OUT/c1.tar.gz c1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_1B olmo2_190M; do
  cat > $W/m/$size.yaml <<YAML
name: gen-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
done; echo "models at $(el)s" ) &
models=$!
timeout 90 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent.log 2>&1
echo "persistent tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_persistent.log | head -20
grep -B2 -A10 "Failure" $W/gpu_persistent.log | head -30
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size variant round
  local size=$1 v=$2 r=$3
  [ $(left) -lt 20 ] && return 1
  FATHOM_PERSISTENT_DECODE=$v timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size persistent=$v r$r" --tokens-out $W/tokens_${size}_${v}_$r.txt 2> $W/gen_${size}_${v}_$r.err | tee -a $W/generate.md
}
for size in olmo2_1B olmo2_190M; do
  [ -d $W/m/$size-hf ] || { echo "no $size model"; tail -3 $W/m/train_$size.log; continue; }
  gen $size off 1; gen $size on 1
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_off_1.txt $W/tokens_${size}_on_1.txt --names off on --label $size --min-tokens 32 >> $W/agreement.txt
  FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_TRACE=$W/trace_$size.csv timeout 20 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 0 --repeats 1 > /dev/null 2>&1
  python3 bench/timeline/persistent_trace.py $W/trace_$size.csv | tee -a $W/traces.txt
done
for size in olmo2_1B olmo2_190M; do gen $size on 2 && gen $size off 2; done
cat $W/agreement.txt
echo "benches done at $(el)s"
if [ $(left) -gt 60 ]; then
  FATHOM_PERSISTENT_DECODE=on timeout 50 /usr/local/cuda/bin/ncu --kernel-name regex:persistent --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o $W/prof -f \
    build/bench/bench_generate hf:$W/m/olmo2_1B-hf --context 128 --batch 1 --new-tokens 6 --warmup 0 --repeats 1 > $W/ncu.log 2>&1
  /usr/local/cuda/bin/ncu -i $W/prof.ncu-rep --page source --csv --print-source sass > $W/sass.csv 2>/dev/null
  python3 .devrun/top_sass.py $W/sass.csv > $W/ncu_top_sass.txt 2>&1; head -45 $W/ncu_top_sass.txt
  /usr/local/cuda/bin/ncu -i $W/prof.ncu-rep --page details > $W/ncu_details.txt 2>&1; grep -E "DRAM Throughput|Duration|Memory Throughput|Warp Cycles Per Issued" $W/ncu_details.txt
  gzip -f $W/sass.csv
  echo "ncu done at $(el)s"
fi
if [ $(left) -gt 100 ]; then
  timeout $(( $(left) - 10 )) build/tests/fathom_gpu_tests > $W/gpu_tests.log 2>&1
  echo "gpu suite rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_tests.log | head -20
  grep -B3 -A12 "Failure" $W/gpu_tests.log | head -40; tail -3 $W/gpu_tests.log
fi
echo "end at $(el)s"
