#!/usr/bin/env bash
# train.precision fp8 on an H200 (docs/DESIGN.md section 2, "FP8 linears"), from a CUDA build in BUILD:
#   1. the FP8 GPU tests (kernels, GEMM, linear, training) of fathom_gpu_tests;
#   2. training step times, bf16 against fp8, side by side: the 190M at 16 x 2048 and the 1B at 4 x 4096
#      (target: fp8 >= 1.15x bf16's tokens/s at 1B);
#      then HF transformers + torch.compile in bf16 at the same shapes (bench/hf_train_reference.py), in
#      the same run on the same GPU (HF=0 leaves it out);
#   3. a short 190M loss comparison on the prepared reference data: 300 steps for each seed of SEEDS
#      (default "1 2"), bf16 and fp8 with the same seeds, all runs at once on the GPU (their losses do not
#      depend on it); the validation loss of fp8 against bf16 (target: within 0.5%) and the spread of each.
# Writes OUT/fp8_report.md (and the logs beside it). Usage: scripts/bench_fp8_device.sh BUILD OUT
set -uo pipefail
BUILD=${1:?usage: scripts/bench_fp8_device.sh BUILD OUT}
OUT=${2:?usage: scripts/bench_fp8_device.sh BUILD OUT}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" || exit 2
export LD_LIBRARY_PATH=$BUILD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
report=$OUT/fp8_report.md
{
  echo "# train.precision fp8 against bf16"
  echo
  echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${FATHOM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date +%Y-%m-%d)"
} >"$report"

echo "== 1. FP8 GPU tests"
"$BUILD/tests/fathom_gpu_tests" --gtest_filter='*Fp8*' 2>&1 | tee "$OUT/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}
{ echo; echo "## GPU tests (*Fp8*): exit $tests_rc"; echo; echo '```'; grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests.log"; grep -E 'largest relative' "$OUT/gpu_tests.log"; echo '```'; } >>"$report"

echo "== 2. step times"
{ echo; echo "## Training step, bf16 and fp8"; echo; } >>"$report"
for precision in bf16 fp8; do
  timeout 900 "$BUILD/bench/bench_train_step" --device cuda --precision $precision olmo2_190M:16x2048 olmo2_1B:4x4096 \
    2>&1 | tee "$OUT/steps_$precision.md"
  grep -E '^\| ' "$OUT/steps_$precision.md" | sed "s/^| /| $precision | /" >>"$OUT/steps.rows"
done
if [ "${HF:-1}" != 0 ]; then
  timeout 900 python3 "$ROOT/bench/hf_train_reference.py" olmo2_190M olmo2_1B 2>&1 | tee "$OUT/steps_hf.md"
  grep -E '^\| ' "$OUT/steps_hf.md" | sed "s/^| /| bf16 | /" >>"$OUT/steps.rows"
fi
{ echo "| precision | system | model | batch x seq | step ms | tokens/s | MFU | peak GiB | held GiB |"; cat "$OUT/steps.rows" 2>/dev/null | grep -v -- '---\|model'; } >>"$report"

echo "== 3. 190M loss, 300 steps each, on the reference data (docs: README, Data)"
data=$ROOT/data/prepared/reference
[ -d "$data" ] || FATHOM="$BUILD/fathom" "$ROOT/scripts/prepare_reference_data.sh" >"$OUT/prepare.log" 2>&1
{ echo; echo "## 190M validation loss after 300 steps (reference data, 8192-token vocabulary), seeds ${SEEDS:-1 2}"; echo; } >>"$report"
if [ -d "$data/train" ]; then
  { echo "| precision | seed | validation losses (last eval) |"; echo "| --- | --- | --- |"; } >>"$report"
  for precision in bf16 fp8; do
    for seed in ${SEEDS:-1 2}; do
      timeout 1500 "$BUILD/fathom" train "$ROOT/recipes/olmo2-190m.yaml" --overwrite --set train.steps=300 \
        --set train.schedule.warmup_steps=30 --set train.precision=$precision --set model.vocab_size=8192 \
        --set train.seed=$seed --set data.tokenizer="$ROOT/data/tokenizers/reference-8192.json" \
        --set "data.train=[$data/train]" \
        --set "data.validation={moby_dick: [$data/validation/moby_dick], sotu_recent: [$data/validation/sotu_recent]}" \
        --set log.dir="$OUT/run_${precision}_$seed" >"$OUT/train_${precision}_$seed.log" 2>&1 &
    done
  done
  wait
  for precision in bf16 fp8; do
    for seed in ${SEEDS:-1 2}; do
      echo "| $precision | $seed | $(grep '"kind":"eval"' "$OUT/run_${precision}_$seed/metrics.jsonl" | tail -1) |" >>"$report"
      rm -rf "$OUT/run_${precision}_$seed/checkpoints"  # keep metrics.jsonl, drop the weights
    done
  done
else
  echo "skipped: no data/prepared/reference (see $OUT/prepare.log)" >>"$report"
fi
cat "$report"
[ "$tests_rc" -eq 0 ]
