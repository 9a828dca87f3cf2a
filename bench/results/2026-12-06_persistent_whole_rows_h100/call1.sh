#!/usr/bin/env bash
# session 19, call 1: build; the persistent tests (whole-row GEMMs on; KV prefetch on); olmo2_190M: the persistent
# step with whole-row GEMMs on and off against the layer-by-layer step; olmo2_1B: the persistent step with and
# without the KV prefetch against the layer-by-layer step (batch 1, context 128 and 4096, two rounds); a 190M trace;
# gpt-fast on the 190M at context 4096 in the time left.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/f1; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='f1/m/*-hf' --exclude='f1/m/*/checkpoints' -czf $OUT/f1.tar.gz f1); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( for size in olmo2_190M olmo2_1B; do
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
timeout 60 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent.log 2>&1
echo "persistent tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent.log
FATHOM_PERSISTENT_KV_PREFETCH=on timeout 60 build/tests/fathom_gpu_tests --gtest_filter='*Persistent*' > $W/gpu_persistent_kvp.log 2>&1
echo "persistent tests (KV prefetch) rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_persistent_kvp.log
wait $models
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
gen() {  # size label round env...
  local size=$1 label=$2 r=$3; shift 3
  [ $(left) -lt 20 ] && return 1
  env "$@" timeout 35 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 3 \
    --label "$size $label r$r" --tokens-out $W/tokens_${size}_${label}_$r.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2; do
  gen olmo2_190M persistent_rows $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_WHOLE_ROWS=on
  gen olmo2_190M persistent_cols $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_WHOLE_ROWS=off
  gen olmo2_190M layered $r FATHOM_PERSISTENT_DECODE=off
  gen olmo2_1B persistent $r FATHOM_PERSISTENT_DECODE=on
  gen olmo2_1B persistent_kvp $r FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_KV_PREFETCH=on
  gen olmo2_1B layered $r FATHOM_PERSISTENT_DECODE=off
done
for v in rows cols; do
  [ $(left) -lt 60 ] && break
  on=$([ $v = rows ] && echo on || echo off)
  FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_WHOLE_ROWS=$on FATHOM_PERSISTENT_TRACE=$W/trace_190M_$v.csv timeout 12 build/bench/bench_generate hf:$W/m/olmo2_190M-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 20 --warmup 0 --repeats 1 > /dev/null 2>&1
  echo "== olmo2_190M $v" >> $W/traces.txt; python3 bench/timeline/persistent_trace.py $W/trace_190M_$v.csv >> $W/traces.txt 2>&1
done
[ $(left) -gt 40 ] && { FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_KV_PREFETCH=on FATHOM_PERSISTENT_TRACE=$W/trace_1B_4096_kvp.csv timeout 12 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --ids $W/ids.txt --context 4096 --batch 1 --new-tokens 20 --warmup 0 --repeats 1 > /dev/null 2>&1
  echo "== olmo2_1B 4096 kvp" >> $W/traces.txt; python3 bench/timeline/persistent_trace.py $W/trace_1B_4096_kvp.csv >> $W/traces.txt 2>&1; }
[ $(left) -gt 40 ] && { FATHOM_PERSISTENT_DECODE=on FATHOM_PERSISTENT_TRACE=$W/trace_1B_4096.csv timeout 12 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --ids $W/ids.txt --context 4096 --batch 1 --new-tokens 20 --warmup 0 --repeats 1 > /dev/null 2>&1
  echo "== olmo2_1B 4096" >> $W/traces.txt; python3 bench/timeline/persistent_trace.py $W/trace_1B_4096.csv >> $W/traces.txt 2>&1; }
cat $W/traces.txt
for size in olmo2_190M olmo2_1B; do
  for f in $W/tokens_${size}_persistent*_1.txt; do
    [ -f $f ] && python3 bench/compare_generate_tokens.py $W/tokens_${size}_layered_1.txt $f --names layered $(basename $f .txt) --label $size --min-tokens 32 >> $W/agreement.txt
  done
done
cat $W/agreement.txt
echo "benches done at $(el)s"
if [ $(left) -gt 150 ]; then
  mkdir -p /tmp/gf && tar -xzf .ref/gpt-fast.tar.gz -C /tmp/gf
  timeout 40 build/bench/bench_generate hf:$W/m/olmo2_190M-hf --ids $W/ids.txt --context 4096 --batch 1,8,32 --new-tokens 40 --repeats 3 \
    --label "olmo2_190M fathom" --tokens-out $W/tokens_f_190M_4096.txt 2>/dev/null | tee -a $W/peers.md
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor timeout $(( $(left) - 8 )) python3 bench/gpt_fast_reference.py $W/m/olmo2_190M-hf --gpt-fast /tmp/gf/gpt-fast \
    --ids $W/ids.txt --context 4096 --batch 1,8,32 --new-tokens 40 --label olmo2_190M --repeats 3 --tuning off --tokens-out $W/tokens_g_190M_4096.txt 2> $W/gptfast_190M.err | tee -a $W/peers.md
  python3 bench/compare_generate_tokens.py $W/tokens_f_190M_4096.txt $W/tokens_g_190M_4096.txt --names fathom gpt-fast --label olmo2_190M --min-tokens 32 | tee -a $W/agreement.txt
fi
echo "end at $(el)s"
