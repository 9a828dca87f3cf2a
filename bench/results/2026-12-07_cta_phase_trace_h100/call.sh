#!/usr/bin/env bash
# session 27, call 2 (diagnostic): per-CTA phase records (cta_trace.cuh, patched in by
# bench/results/2026-12-07_cta_phase_trace_h100/patch_cta_trace.py) of the few-rows decode attention and the skinny GEMMs during greedy decoding, OLMo2 1B
# and 190M at batch 1, context 128 (and the 1B at 4096); summarised by bench/results/2026-12-07_cta_phase_trace_h100/cta_trace_report.py.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c19; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' --exclude='*.bin' -czf $OUT/c19.tar.gz c19); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?} + bench/results/2026-12-07_cta_phase_trace_h100/patch_cta_trace.py" >> $W/device.txt
python3 bench/results/2026-12-07_cta_phase_trace_h100/patch_cta_trace.py || exit 1
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "built at $(el)s"
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
t() {  # size context
  [ $(left) -lt 30 ] && return
  mkdir -p $W/t_$1_$2
  CTA_TRACE_DIR=$W/t_$1_$2 timeout 60 build/bench/bench_generate hf:$W/m/$1-hf --context $2 --batch 1 --new-tokens 40 \
    --repeats 3 --label "$1 traced" 2>&1 | tee -a $W/generate.md
  python3 bench/results/2026-12-07_cta_phase_trace_h100/cta_trace_report.py $W/t_$1_$2/attention.bin $W/t_$1_$2/skinny.bin > $W/report_$1_$2.txt 2>&1
  cat $W/report_$1_$2.txt
}
t olmo2_1B 128
t olmo2_190M 128
t olmo2_1B 4096
echo "end at $(el)s"
