#!/usr/bin/env bash
# session 17, call 2: build; the persistent tests (default, and every short cache split); olmo2_1B and olmo2_190M
# (3 training steps); the layer-by-layer step against the persistent kernel under its measurement knobs (one split
# a head at short context or not, the L2 lead 0, 8 or 16 items) at batch 1, context 128 and 4096, two rounds;
# traces at context 128.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-480}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c2; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c2/m/*-hf' --exclude='c2/m/*/checkpoints' -czf $OUT/c2.tar.gz c2); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
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
FATHOM_PERSISTENT_ONE_SPLIT_TILES=1 timeout 90 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent_split1.log 2>&1
echo "persistent tests (one split tile 1) rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_persistent_split1.log | head -20
grep -B2 -A10 "Failure" $W/gpu_persistent_split1.log | head -30
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
declare -A CFG=([off]="FATHOM_PERSISTENT_DECODE=off" [on]="FATHOM_PERSISTENT_DECODE=on"
  [split1]="FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_ONE_SPLIT_TILES=1"
  [lead0]="FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_LEAD_ITEMS=0"
  [lead16]="FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_LEAD_ITEMS=16")
gen() {  # size config round
  local size=$1 v=$2 r=$3
  [ $(left) -lt 20 ] && return 1
  env ${CFG[$v]} timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size $v r$r" --tokens-out $W/tokens_${size}_${v}_$r.txt 2> $W/gen_${size}_${v}_$r.err | tee -a $W/generate.md
}
trace() {  # size config
  env ${CFG[$2]} FATHOM_PERSISTENT_TRACE=$W/trace_$1_$2.csv timeout 20 build/bench/bench_generate hf:$W/m/$1-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 0 --repeats 1 > /dev/null 2>&1
  echo "== $1 $2" >> $W/traces.txt; python3 bench/timeline/persistent_trace.py $W/trace_$1_$2.csv | tee -a $W/traces.txt
}
gen olmo2_1B off 1; gen olmo2_1B on 1; gen olmo2_1B split1 1
for v in on split1; do python3 bench/compare_generate_tokens.py $W/tokens_olmo2_1B_off_1.txt $W/tokens_olmo2_1B_${v}_1.txt --names off $v --label olmo2_1B --min-tokens 32 >> $W/agreement.txt; done
trace olmo2_1B on; trace olmo2_1B split1
gen olmo2_1B lead0 1; gen olmo2_1B lead16 1
gen olmo2_190M off 1; gen olmo2_190M on 1; gen olmo2_190M split1 1
for v in on split1; do python3 bench/compare_generate_tokens.py $W/tokens_olmo2_190M_off_1.txt $W/tokens_olmo2_190M_${v}_1.txt --names off $v --label olmo2_190M --min-tokens 32 >> $W/agreement.txt; done
trace olmo2_190M on; trace olmo2_190M split1
echo "round 1 done at $(el)s"
gen olmo2_1B lead16 2; gen olmo2_1B lead0 2; gen olmo2_1B split1 2; gen olmo2_1B on 2; gen olmo2_1B off 2
gen olmo2_190M split1 2; gen olmo2_190M on 2; gen olmo2_190M off 2
cat $W/agreement.txt
echo "end at $(el)s"
