#!/usr/bin/env bash
# session 15, call 4: commit 6ed3246 plus .devrun/diag_stream_only.patch (FATHOM_PD_DIAG=1: the consumers take and
# release every GEMM item without computing it). olmo2_190M and olmo2_1B, batch 1, context 128: the layer-by-layer
# step, the persistent kernel, and the persistent kernel streaming alone, with traces.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-240}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c4; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c4/m/*-hf' --exclude='c4/m/*/checkpoints' -czf $OUT/c4.tar.gz c4); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
for size in olmo2_190M olmo2_1B; do
  [ $(left) -lt 40 ] && break
  cat > $W/m/$size.yaml <<YAML
name: gen-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/$size}
YAML
  build/fathom train $W/m/$size.yaml --overwrite > $W/m/train_$size.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/$size --out $W/m/$size-hf --dtype bf16 --overwrite > /dev/null
  echo "$size at $(el)s"
  for v in off on diag; do
    [ $(left) -lt 15 ] && break
    env=FATHOM_PERSISTENT_DECODE=on; [ $v = off ] && env=FATHOM_PERSISTENT_DECODE=off
    d=0; [ $v = diag ] && d=1
    env $env FATHOM_PD_DIAG=$d FATHOM_PERSISTENT_TRACE=$W/trace_${size}_$v.csv timeout 25 build/bench/bench_generate hf:$W/m/$size-hf --ids $W/ids.txt --context 128 --batch 1 --new-tokens 40 --warmup 1 --repeats 3 --label "$size $v" 2>/dev/null | tee -a $W/generate.md
    [ -f $W/trace_${size}_$v.csv ] && python3 .devrun/trace_summary.py $W/trace_${size}_$v.csv | tee -a $W/traces.txt
  done
done
echo "end at $(el)s"
