#!/usr/bin/env bash
# session 18, call 1 (branch l2-evict-first): build; the persistent tests with and without evict-first weights;
# olmo2_1B and olmo2_190M; persistent on with FATHOM_PERSISTENT_EVICT_FIRST=0|1 (two rounds, traces); then the
# layer-by-layer step with the skinny GEMM's kWeightsEvictFirst false (as built) and true (flipped, rebuilt), two
# rounds, with the skinny and decoding GPU tests on the flipped build.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/e1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='e1/m/*-hf' --exclude='e1/m/*/checkpoints' -czf $OUT/e1.tar.gz e1); }
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
for e in 0 1; do
  FATHOM_PERSISTENT_EVICT_FIRST=$e timeout 60 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent_e$e.log 2>&1
  echo "persistent tests evict_first=$e rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent_e$e.log
done
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size label round env...
  local size=$1 label=$2 r=$3; shift 3
  [ $(left) -lt 20 ] && return 1
  env "$@" timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size $label r$r" --tokens-out $W/tokens_${size}_${label}_$r.txt 2> /dev/null | tee -a $W/generate.md
}
FATHOM_PERSISTENT_IDLE_PREFETCH_KB=512 timeout 60 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent_pf512.log 2>&1
echo "persistent tests idle prefetch 512 KiB rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent_pf512.log
for r in 1 2; do for size in olmo2_1B olmo2_190M; do
  gen $size persistent_e0 $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_EVICT_FIRST=0
  gen $size persistent_e1 $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_EVICT_FIRST=1
  gen $size persistent_pf256 $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_IDLE_PREFETCH_KB=256
  gen $size persistent_pf512 $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_IDLE_PREFETCH_KB=512
  gen $size layered_plain $r FATHOM_PERSISTENT_DECODE=off
done; done
for v in e0:FATHOM_PERSISTENT_EVICT_FIRST=0 e1:FATHOM_PERSISTENT_EVICT_FIRST=1 pf512:FATHOM_PERSISTENT_IDLE_PREFETCH_KB=512; do
  size=olmo2_1B; label=${v%%:*}
  env FATHOM_PERSISTENT_DECODE=on ${v#*:} FATHOM_PERSISTENT_TRACE=$W/trace_${size}_$label.csv timeout 20 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 0 --repeats 1 > /dev/null 2>&1
  echo "== $size $label" >> $W/traces.txt; python3 bench/timeline/persistent_trace.py $W/trace_${size}_$label.csv >> $W/traces.txt
done
cat $W/traces.txt
echo "persistent done at $(el)s"
sed -i 's/constexpr bool kWeightsEvictFirst = false;/constexpr bool kWeightsEvictFirst = true;/' kernels/matmul/skinny_matmul.cu
cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests > $W/build2.log 2>&1 || { grep -B2 -A8 error $W/build2.log | head -40; exit 1; }
echo "rebuilt (skinny evict-first) at $(el)s"
timeout 90 build/tests/fathom_gpu_tests --gtest_filter='*Skinny*:*Decod*:*Generat*' > $W/gpu_skinny_evict.log 2>&1
echo "skinny/decoding tests (evict-first) rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_skinny_evict.log
for r in 1 2; do for size in olmo2_1B olmo2_190M; do gen $size layered_evict $r FATHOM_PERSISTENT_DECODE=off; done; done
for size in olmo2_1B olmo2_190M; do
  python3 bench/compare_generate_tokens.py $W/tokens_${size}_layered_plain_1.txt $W/tokens_${size}_layered_evict_1.txt --names plain evict --label $size --min-tokens 32 >> $W/agreement.txt
  for v in e1 pf512; do python3 bench/compare_generate_tokens.py $W/tokens_${size}_layered_plain_1.txt $W/tokens_${size}_persistent_${v}_1.txt --names layered persistent_$v --label $size --min-tokens 32 >> $W/agreement.txt; done
done
cat $W/agreement.txt
echo "end at $(el)s"
