#!/usr/bin/env bash
# session 28, call 3: the pre-norm hand-on as committed (the next block's q/k/v launch takes the step at batch 1; the
# add and the norm launch otherwise), against FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=separate. GPU tests first, then the
# Llama-3.2-1B shape (3 training steps), three paired rounds, batch 1 and 8, context 128 and 4096. Third variant
# "addsep": FATHOM_ADD_RMS_NORM=separate (the add and the norm launch for gate/up's step at batch 8, where the one
# pass looked slow; at batch 1 it also turns off the pre-norm steps inside the GEMM launches).
# Run as FATHOM_COMMIT=<sha> DEADLINE=<s> bash .devrun/s28c3.sh with carry [".devrun", ".debs"].
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(el) )); }
W=/tmp/c29; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c29.tar.gz c29); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader | tee $W/device.txt
echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate fathom_gpu_tests; } > $W/build.log 2>&1 || { grep -B2 -A8 "error" $W/build.log | head -60; exit 1; }
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
echo "built at $(el)s"
timeout 120 build/tests/fathom_gpu_tests --gtest_filter='*DecodeStep*:*Generat*:*ResidualStep*:*AddRmsNorm*' > $W/gpu_tests.log 2>&1
echo "tests rc=$? at $(el)s"; grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' $W/gpu_tests.log
cat > $W/m/llama3_1B.yaml <<YAML
name: c-llama3_1B
model: {d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256, norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000, rope_scaling: {type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/llama3_1B}
YAML
build/fathom train $W/m/llama3_1B.yaml --overwrite > $W/m/train.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/llama3_1B --out $W/m/llama3_1B-hf --dtype bf16 --overwrite > /dev/null
echo "model at $(el)s"
b() {  # variant round
  [ $(left) -lt 25 ] && return
  local e="FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused"; [ $1 = separate ] && e="FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=separate"
  [ $1 = addsep ] && e="FATHOM_ADD_RMS_NORM=separate"
  env $e timeout 40 build/bench/bench_generate hf:$W/m/llama3_1B-hf --context 128,4096 --batch 1,8 --new-tokens 40 \
    --repeats 3 --label "llama3_1B $1 r$2" --tokens-out $W/tokens_$1_$2.txt 2> /dev/null | tee -a $W/generate.md
}
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then order="base separate addsep"; else order="addsep separate base"; fi
  for v in $order; do b $v $r; done
done
python3 bench/compare_rounds.py $W/generate.md --baseline base | tee $W/changes.md
for v in separate addsep; do [ -f $W/tokens_${v}_1.txt ] && python3 bench/compare_generate_tokens.py $W/tokens_base_1.txt \
  $W/tokens_${v}_1.txt --names base $v --label llama3_1B | tee -a $W/agreement.txt; done
echo "end at $(el)s"
