#!/usr/bin/env bash
# train.precision fp8 against bf16 on a Hopper GPU (docs/DESIGN.md section 2, "FP8 linears"), from a CUDA
# build in BUILD. PARTS (default "tests steps loss190m loss1b") picks what runs, in this order:
#   tests     the FP8 GPU tests (kernels, GEMM, linear, training) of fathom_gpu_tests;
#   steps     training step times, bf16 against fp8, side by side: the 190M at 16 x 2048 and the 1B at
#             4 x 4096 (target: fp8 >= 1.15x bf16's tokens/s at 1B), or the MODEL:BATCHxSEQ list of
#             STEP_CONFIGS (sizes between them find where fp8 starts to pay); then HF transformers + torch.compile
#             in bf16 at the shapes of HF_CONFIGS (default both; HF=0 leaves HF out) in the same run;
#   loss190m  the 190M on the prepared reference data (8,192-token vocabulary), STEPS_190M steps (default
#             400) for each seed of SEEDS (default "1 2 3"), bf16 and fp8 with the same seeds, a seed's two
#             runs at once on the GPU (their losses do not depend on sharing it);
#   loss1b    the 1B on the same data, STEPS_1B steps (default 300) at seed 1, bf16 then fp8 (one at a
#             time: two 1B runs do not fit an 80 GB GPU together).
# The loss runs keep metrics.jsonl and drop their weights; scripts/fp8_loss_report.py turns them into the
# comparison (paired by seed) and scripts/plot_runs.py into curves.
# Writes OUT/fp8_report.md (and the logs and run folders beside it). Usage: scripts/bench_fp8_device.sh BUILD OUT
set -uo pipefail
BUILD=${1:?usage: scripts/bench_fp8_device.sh BUILD OUT}
OUT=${2:?usage: scripts/bench_fp8_device.sh BUILD OUT}
PARTS=${PARTS:-tests steps loss190m loss1b}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" || exit 2
export LD_LIBRARY_PATH=$BUILD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
report=$OUT/fp8_report.md
data=$ROOT/data/prepared/reference
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
[ -f "$report" ] || {
  echo "# train.precision fp8 against bf16"
  echo
  echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit ${FATHOM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date +%Y-%m-%d)"
} >"$report"
tests_rc=0

if has_part tests; then
  echo "== FP8 GPU tests"
  "$BUILD/tests/fathom_gpu_tests" --gtest_filter='*Fp8*' 2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=${PIPESTATUS[0]}
  { echo; echo "## GPU tests (*Fp8*): exit $tests_rc"; echo; echo '```'; grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests.log"; grep -E 'largest relative' "$OUT/gpu_tests.log"; echo '```'; } >>"$report"
fi

if has_part steps; then
  echo "== step times"
  { echo; echo "## Training step, bf16 and fp8"; echo; } >>"$report"
  for precision in bf16 fp8; do
    timeout 900 "$BUILD/bench/bench_train_step" --device cuda --precision $precision ${STEP_CONFIGS:-olmo2_190M:16x2048 olmo2_1B:4x4096} \
      2>&1 | tee "$OUT/steps_$precision.md"
    grep -E '^\| ' "$OUT/steps_$precision.md" | sed "s/^| /| $precision | /" >>"$OUT/steps.rows"
  done
  if [ "${HF:-1}" != 0 ]; then
    timeout 900 python3 "$ROOT/bench/hf_train_reference.py" ${HF_CONFIGS:-olmo2_190M olmo2_1B} 2>&1 | tee "$OUT/steps_hf.md"
    grep -E '^\| ' "$OUT/steps_hf.md" | sed "s/^| /| bf16 | /" >>"$OUT/steps.rows"
  fi
  { echo "| precision | system | model | batch x seq | step ms | tokens/s | MFU | peak GiB | held GiB | train GFLOP/token |"; echo "|---|---|---|---|---:|---:|---:|---:|---:|---:|"; grep -v -- '---\|model' "$OUT/steps.rows" 2>/dev/null; } >>"$report"
fi

# train_run NAME RECIPE STEPS PRECISION SEED [--set ...]: one loss run on the reference data into OUT/NAME.
train_run() {
  local name=$1 recipe=$2 steps=$3 precision=$4 seed=$5
  shift 5
  timeout 1500 "$BUILD/fathom" train "$ROOT/recipes/$recipe" --overwrite --set train.steps="$steps" \
    --set train.precision="$precision" --set train.seed="$seed" --set model.vocab_size=8192 \
    --set data.tokenizer="$ROOT/data/tokenizers/reference-8192.json" --set "data.train=[$data/train]" \
    --set "data.validation={moby_dick: [$data/validation/moby_dick], sotu_recent: [$data/validation/sotu_recent]}" \
    --set checkpoint.every="$steps" --set log.dir="$OUT/$name" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: exit $?" >>"$OUT/loss_runs.txt"
  rm -rf "$OUT/$name/checkpoints"  # keep metrics.jsonl, drop the weights
}

if has_part loss190m || has_part loss1b; then
  [ -d "$data/train" ] || FATHOM="$BUILD/fathom" "$ROOT/scripts/prepare_reference_data.sh" >"$OUT/prepare.log" 2>&1
  [ -d "$data/train" ] || { echo "no data/prepared/reference (see $OUT/prepare.log)" | tee -a "$report"; exit 1; }
fi

if has_part loss190m; then
  echo "== 190M losses"
  steps=${STEPS_190M:-400}
  for seed in ${SEEDS:-1 2 3}; do  # a seed's two runs at once: six 190M runs at once may not fit 80 GB
    for precision in bf16 fp8; do
      train_run "olmo2_190M_${precision}_seed$seed" olmo2-190m.yaml "$steps" $precision "$seed" \
        --set train.schedule.warmup_steps=$((steps / 10)) --set eval.every=$((steps / 8)) --set eval.batches=8 &
    done
    wait
  done
fi

if has_part loss1b; then
  echo "== 1B losses"
  steps=${STEPS_1B:-300}
  for precision in bf16 fp8; do
    train_run "olmo2_1B_${precision}_seed1" olmo2-1b.yaml "$steps" $precision 1 \
      --set train.schedule.warmup_steps=$((steps / 10)) --set eval.every=$((steps / 6)) --set eval.batches=8
  done
fi

cat "$report"
[ "$tests_rc" -eq 0 ]
