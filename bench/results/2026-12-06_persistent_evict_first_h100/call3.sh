#!/usr/bin/env bash
# session 18, call 3 (branch l2-evict-first, evict-first always on): build; the persistent kernel's SASS; the
# persistent tests; olmo2_1B and olmo2_190M, persistent (one split a tile: FATHOM_PERSISTENT_ONE_SPLIT_TILES=1, and
# the default) and layer-by-layer, two rounds; traces; ncu's per-instruction samples (1B); then an 11-stage ring
# (sed, rebuilt), its tests, two rounds and a trace.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-580}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/e3; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='e3/m/*-hf' --exclude='e3/m/*/checkpoints' --exclude='*.ncu-rep' -czf $OUT/e3.tar.gz e3); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
obj=$(find build -name 'persistent_decode.cu.o' | head -1)
/usr/local/cuda/bin/cuobjdump -sass "$obj" > $W/persistent_sass8.txt 2>&1; gzip -f $W/persistent_sass8.txt
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
timeout 60 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent8.log 2>&1
echo "persistent tests (8 stages) rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent8.log
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size label round env...
  local size=$1 label=$2 r=$3; shift 3
  [ $(left) -lt 20 ] && return 1
  env "$@" timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size $label r$r" --tokens-out $W/tokens_${size}_${label}_$r.txt 2> /dev/null | tee -a $W/generate.md
}
trace() {  # size label env...
  local size=$1 label=$2; shift 2
  env FATHOM_PERSISTENT_DECODE=on "$@" FATHOM_PERSISTENT_TRACE=$W/trace_${size}_$label.csv timeout 20 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 0 --repeats 1 > /dev/null 2>&1
  echo "== $size $label" >> $W/traces.txt; python3 bench/timeline/persistent_trace.py $W/trace_${size}_$label.csv >> $W/traces.txt
}
for r in 1 2; do for size in olmo2_1B olmo2_190M; do
  gen $size persistent8 $r FATHOM_PERSISTENT_DECODE=on
  gen $size persistent8_split1 $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_ONE_SPLIT_TILES=1
  gen $size layered $r FATHOM_PERSISTENT_DECODE=off
done; done
trace olmo2_1B s8; trace olmo2_190M s8
echo "benches done at $(el)s"
if [ $(left) -gt 200 ]; then
  FATHOM_PERSISTENT_DECODE=on timeout 60 /usr/local/cuda/bin/ncu --kernel-name regex:persistent --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o $W/prof -f \
    build/bench/bench_generate hf:$W/m/olmo2_1B-hf --context 128 --batch 1 --new-tokens 6 --warmup 0 --repeats 1 > $W/ncu.log 2>&1
  /usr/local/cuda/bin/ncu -i $W/prof.ncu-rep --page source --csv --print-source sass > $W/sass8_ncu.csv 2>/dev/null
  /usr/local/cuda/bin/ncu -i $W/prof.ncu-rep --page details > $W/ncu_details.txt 2>&1
  gzip -f $W/sass8_ncu.csv
  grep -E "Duration|Warp Cycles Per Issued|No Instruction|Stall" $W/ncu_details.txt | head -12
  echo "ncu done at $(el)s"
fi
sed -i 's/constexpr int kStages = 8;/constexpr int kStages = 11;/; /static_assert((kStages & (kStages - 1)) == 0/d' kernels/decode_step/persistent_decode.cu
cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests > $W/build11.log 2>&1 || { grep -B2 -A8 error $W/build11.log | head -40; exit 1; }
echo "rebuilt (11 stages) at $(el)s"
timeout 40 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent11.log 2>&1
echo "persistent tests (11 stages) rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent11.log
for r in 1 2; do for size in olmo2_1B olmo2_190M; do gen $size persistent11 $r FATHOM_PERSISTENT_DECODE=on; done; done
trace olmo2_1B s11
cat $W/traces.txt
for size in olmo2_1B olmo2_190M; do for v in persistent8 persistent8_split1 persistent11; do
  [ -f $W/tokens_${size}_${v}_1.txt ] && python3 bench/compare_generate_tokens.py $W/tokens_${size}_layered_1.txt $W/tokens_${size}_${v}_1.txt --names layered $v --label $size --min-tokens 32 >> $W/agreement.txt
done; done
cat $W/agreement.txt
echo "end at $(el)s"
