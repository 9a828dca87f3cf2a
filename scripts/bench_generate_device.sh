#!/usr/bin/env bash
# fathom's generation against HF transformers' generate on the same weights, one after the other on the
# same GPU (docs/DESIGN.md section 9). For each size: a fathom checkpoint of the size's initial weights
# (one step at lr 1e-9 on the quickstart corpus, dolma2 tokenizer), exported with `fathom export` as the
# HF folder both read; a 128-token prompt from Moby Dick; greedy decoding to exactly N new tokens at
# each batch size: bench/bench_generate (fathom) and bench/hf_generate_reference.py (HF, static cache;
# with HF_COMPILE=1 also torch.compile). Writes $OUT/generate.md.
# Usage: scripts/bench_generate_device.sh BUILD OUT [SIZE...]   (SIZE: olmo2_190M, olmo2_1B; default both)
set -uo pipefail
BUILD=${1:?usage: scripts/bench_generate_device.sh BUILD OUT [SIZE...]}
OUT=${2:?usage: scripts/bench_generate_device.sh BUILD OUT [SIZE...]}
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(olmo2_190M olmo2_1B)
N=${NEW_TOKENS:-256}
mkdir -p "$OUT" /tmp/fathom-gen || exit 2
fathom=$BUILD/fathom
prompt=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 2000)
"$fathom" tokenizer encode --tokenizer dolma2 "$prompt" | tr ' ' '\n' | head -128 | tr '\n' ' ' > /tmp/fathom-gen/ids.txt
{
  echo "# Generation: fathom vs HF transformers generate"
  echo
  echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${FATHOM_COMMIT:-unknown}, $(date +%Y-%m-%d); greedy, bf16, prompt 128 tokens, $N new tokens"
  echo
  echo "| system | model | batch | prompt | new | prefill ms | prefill tok/s | decode ms/step | decode tok/s |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} > "$OUT/generate.md"
for size in "${sizes[@]}"; do
  run=/tmp/fathom-gen/$size
  cat > /tmp/fathom-gen/$size.yaml <<YAML
name: gen-$size
model: {size: $size}
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: cuda, batch_size: 1, seq_len: 256, steps: 1, optimizer: {lr: 1.0e-9}}
log: {dir: $run}
YAML
  "$fathom" train /tmp/fathom-gen/$size.yaml --overwrite > "$OUT/train_$size.log" 2>&1 || { tail -5 "$OUT/train_$size.log"; continue; }
  "$fathom" export --format hf --checkpoint "$run" --out "$run-hf" --dtype bf16 --overwrite > /dev/null || continue
  timeout 300 "$BUILD/bench/bench_generate" "$run" /tmp/fathom-gen/ids.txt "$N" 1 32 | tee -a "$OUT/generate.md"
  timeout 400 python3 bench/hf_generate_reference.py "$run-hf" --ids /tmp/fathom-gen/ids.txt --max-new-tokens "$N" \
    --batch 1 32 --label "$size" 2>"$OUT/hf_$size.err" | tee -a "$OUT/generate.md"
  if [ "${HF_COMPILE:-0}" = 1 ]; then
    timeout 400 python3 bench/hf_generate_reference.py "$run-hf" --ids /tmp/fathom-gen/ids.txt --max-new-tokens "$N" \
      --batch 1 32 --label "$size" --compile 2>"$OUT/hf_compile_$size.err" | tee -a "$OUT/generate.md"
  fi
done
cat "$OUT/generate.md"
