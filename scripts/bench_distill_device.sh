#!/usr/bin/env bash
# The GPU distillation benchmark in one session (a CUDA build's fathom in BIN): trains the 190M
# teacher (recipes/dsla/teacher_190m.yaml), distils it to 25% and 50% DSLA in entropy order
# (recipes/dsla/distill_190m.yaml, alone on the GPU: its per-layer times and memory are the
# measurement), then, side by side, two 25% variants for the paper's comparisons: one state instead
# of two (gate_cos off: it compares two states' gates) and a fixed random order (Python's
# random.Random(2506).shuffle of layers 0..11; scripts/tables/distill_chains.py draws shuffle i at
# seed i from random.Random(2506 + i)).
# Writes two files to OUT (a device session returns few): distill_bench.md (each chain's distill.md
# and order.md, the per-layer time and memory lines, the teacher's last steps) and distill_bench.json
# (each chain's distill.json by name); the runs' logs stay beside their folders in RUNS, and their
# tails go to stdout when a run fails.
# Usage: scripts/bench_distill_device.sh BIN OUT [RUNS] [TEACHER_STEPS] [STEPS_PER_LAYER]
set -uo pipefail
BIN=${1:?usage: scripts/bench_distill_device.sh BIN OUT [RUNS] [TEACHER_STEPS] [STEPS_PER_LAYER]}
OUT=${2:?usage: scripts/bench_distill_device.sh BIN OUT [RUNS] [TEACHER_STEPS] [STEPS_PER_LAYER]}
RUNS=${3:-runs/bench-distill}
TEACHER_STEPS=${4:-300}
STEPS=${5:-100}
RANDOM_ORDER="[4, 9, 8, 3, 11, 1, 10, 0, 6, 2, 5, 7]"
mkdir -p "$OUT" "$RUNS" || exit 2
RUNS=$(cd "$RUNS" && pwd)
F="$BIN/fathom"

stage() {  # name, limit in seconds, command...: the command's output in RUNS/name.log, its time on stdout
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout "$limit" "$@" > "$RUNS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start)) s"
  [ $rc -eq 0 ] || tail -25 "$RUNS/$name.log"
  return $rc
}

stage teacher 150 "$F" train recipes/dsla/teacher_190m.yaml --set "train.steps=$TEACHER_STEPS" \
  --set "log.dir=$RUNS/teacher" || exit 1
common=(--set "distill.teacher=checkpoint:$RUNS/teacher" --set "distill.steps_per_layer=$STEPS"
        --set checkpoint.every=0)
stage entropy 240 "$F" distill recipes/dsla/distill_190m.yaml "${common[@]}" --set "log.dir=$RUNS/entropy"
stage one_state 200 "$F" distill recipes/dsla/distill_190m.yaml "${common[@]}" --set "log.dir=$RUNS/one_state" \
  --set dsla.states=1 --set "distill.loss={ce: 1.0, logit_kl: 1.0, layer_align: 1.0}" \
  --set "distill.layers=[0.25]" &
stage random 200 "$F" distill recipes/dsla/distill_190m.yaml "${common[@]}" --set "log.dir=$RUNS/random" \
  --set "distill.order=$RANDOM_ORDER" --set "distill.layers=[0.25]" &
wait
md="$OUT/distill_bench.md"
{
  echo "# fathom distill on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%Y-%m-%d)"
  echo
  echo "## teacher (last log lines)"
  echo
  tail -4 "$RUNS/teacher.log" | sed 's/^/    /'
  for chain in entropy one_state random; do
    echo
    echo "## chain $chain"
    echo
    grep -h "fathom distill\|trained in" "$RUNS/$chain.log" 2>/dev/null | sed 's/^/    /'
    for file in distill.md order.md; do
      echo
      cat "$RUNS/$chain/$file" 2>/dev/null || echo "(no $file: the chain did not finish)"
    done
  done
} > "$md"
{
  echo "{"
  first=1
  for chain in entropy one_state random; do
    [ -f "$RUNS/$chain/distill.json" ] || continue
    [ $first -eq 1 ] || echo ","
    printf '"%s": ' "$chain"
    cat "$RUNS/$chain/distill.json"
    first=0
  done
  echo "}"
} > "$OUT/distill_bench.json"
cat "$md"
