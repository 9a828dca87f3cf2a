#!/usr/bin/env bash
# session 14, call 3: build the landed tree; the decode-attention, decoding-step, prologue and generation GPU tests
# (the merge now a kernel of its own and chosen by FATHOM_MERGE_IN_SPLIT); the 1B's steps with the defaults (auto)
# against never and always at batch 1, context 128 and 4096.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-290}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c3; mkdir -p $W
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='c3/m/*-hf' --exclude='c3/m/*/checkpoints' -czf $OUT/c3.tar.gz c3); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p $W/m
( cat > $W/m/olmo2_1B.yaml <<YAML
name: gen-olmo2_1B
model: {size: olmo2_1B}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 10, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 5}}
log: {dir: $W/m/olmo2_1B}
YAML
  build/fathom train $W/m/olmo2_1B.yaml --overwrite > $W/m/train.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/olmo2_1B --out $W/m/olmo2_1B-hf --dtype bf16 --overwrite > /dev/null
  echo "model at $(el)s" ) &
model=$!
timeout $(( $(left) - 60 )) build/tests/fathom_gpu_tests --gtest_filter='*DecodeAttention*:GpuDecodeStep.*:*Prologue*:*Generat*' > $W/gpu_tests.log 2>&1
echo "gpu tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' $W/gpu_tests.log | head -20
grep -B3 -A12 "Failure" $W/gpu_tests.log | head -40
wait $model
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
build/fathom tokenizer encode --tokenizer dolma2 "$text" > $W/ids.txt
for v in auto never always; do
  [ $(left) -lt 15 ] && break
  FATHOM_MERGE_IN_SPLIT=$v timeout 25 build/bench/bench_generate hf:$W/m/olmo2_1B-hf --ids $W/ids.txt --context 128,4096 --batch 1 --new-tokens 40 --repeats 4 \
    --label "olmo2_1B $v" --tokens-out $W/tokens_$v.txt 2> $W/gen_$v.err | tee -a $W/generate.md
done
for v in never always; do python3 bench/compare_generate_tokens.py $W/tokens_auto.txt $W/tokens_$v.txt --names auto $v --label olmo2_1B --min-tokens 32 >> $W/agreement.txt; done
cat $W/agreement.txt
echo "end at $(el)s"
