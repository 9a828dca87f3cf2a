#!/usr/bin/env bash
# session 24, call 5 (short): the Llama-3.2-1B shape at batch 8 and 32, context 128, with attention's cluster merge on
# (the default) and off, two rounds of opposite order, tokens compared.
set -uo pipefail
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
W=/tmp/c8; mkdir -p $W/m
pack() { (cd /tmp && tar --exclude='*.safetensors' --exclude='*-hf' --exclude='checkpoints' -czf $OUT/c8.tar.gz c8); }
trap pack EXIT
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/device.txt; echo "commit ${FATHOM_COMMIT:-?}" >> $W/device.txt
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFATHOM_CUDA=ON && cmake --build build -j16 --target fathom bench_generate; } > $W/build.log 2>&1 || exit 1
echo "built at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cat > $W/m/llama.yaml <<YAML
name: llama
model: {d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256, norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 8, seq_len: 256, steps: 3, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 1}}
log: {dir: $W/m/llama}
YAML
build/fathom train $W/m/llama.yaml --overwrite > $W/m/train.log 2>&1 && \
  build/fathom export --format hf --checkpoint $W/m/llama --out $W/m/llama-hf --dtype bf16 --overwrite > /dev/null
echo "model at $(el)s"
b() { FATHOM_MERGE_IN_CLUSTER=$1 timeout 30 build/bench/bench_generate hf:$W/m/llama-hf --context 128 --batch 8,32 \
  --new-tokens 40 --repeats 3 --label "llama3_1B cluster=$1 r$2" --tokens-out $W/tokens_$1_$2.txt 2> /dev/null | tee -a $W/cluster.md; }
b on 1; b off 1; b off 2; b on 2
python3 bench/compare_generate_tokens.py $W/tokens_on_1.txt $W/tokens_off_1.txt --names on off --label llama3_1B > $W/agreement.txt; cat $W/agreement.txt
echo "end at $(el)s"
