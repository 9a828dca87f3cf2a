#!/usr/bin/env bash
# Data-parallel scaling on one machine: fathom (`mpirun -np N fathom train`, plain and ZeRO-1) and HF
# transformers + torch.compile under PyTorch DDP (torchrun), the OLMo2 190M and 1B at world sizes 1, 2,
# 4, 8 (those the machine has GPUs for), every rank at the recipe's per-GPU batch, so both sides step at
# the same global batch of batch x world sequences. Then two checks on 2 ranks: the loss curve against
# one rank with twice the gradient accumulation (the same global batch), and a rank killed with
# SIGKILL mid-run (the job must fail with an error and leave only complete checkpoints).
# Writes OUT/scaling.md (the table, the checks, every command), OUT/commands.txt and the logs.
#
# Usage: scripts/bench_scaling_device.sh --out DIR [--bin FATHOM] [--steps N] [--warmup N]
#                                        [--dry-run] [--cpu-smoke]
#   --dry-run    prints the commands and runs nothing
#   --cpu-smoke  CPU ranks (mpirun --oversubscribe) on a tiny model, worlds 1 and 2, no HF side: the
#                same launch, parse, table and check code on a machine without GPUs
#   FATHOM_COMMIT names the commit the binary was built from (a device's copy may carry a stale .git).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="" BIN="$ROOT/build/fathom" STEPS=30 WARMUP=8 DRY=0 SMOKE=0
usage() { sed -n '10,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --bin) BIN=${2:?--bin needs a path}; shift 2 ;;
    --steps) STEPS=${2:?--steps needs a number}; shift 2 ;;
    --warmup) WARMUP=${2:?--warmup needs a number}; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --cpu-smoke) SMOKE=1; shift ;;
    -h|--help) usage ;;
    *) echo "bench_scaling_device.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$OUT" ] || { echo "bench_scaling_device.sh: --out DIR is required" >&2; exit 2; }
for n in "$STEPS" "$WARMUP"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "bench_scaling_device.sh: --steps and --warmup take a positive integer, not '$n'" >&2; exit 2; }
done
[ $DRY -eq 1 ] || [ -x "$BIN" ] || { echo "bench_scaling_device.sh: no executable fathom at $BIN (--bin)" >&2; exit 2; }
[ $DRY -eq 1 ] || command -v mpirun >/dev/null || { echo "bench_scaling_device.sh: mpirun not found (Open MPI)" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
: > "$OUT/commands.txt"
export PYTHONUNBUFFERED=1

MPI=(mpirun --allow-run-as-root --bind-to none)
if [ $SMOKE -eq 1 ]; then
  MPI+=(--oversubscribe)
  device="CPU ($(nproc) cores), --cpu-smoke"
  gpus=2
  # A tiny model on the committed sample text: seconds per run, yet every code path of the GPU run.
  cat > "$OUT/cpu-smoke.yaml" <<YAML
name: cpu-smoke
model: {size: olmo2_14M, vocab_size: 512}
data: {tokenizer: bytes, train: [$ROOT/data/corpus/sample/train]}
train: {device: cpu, threads: 1, batch_size: 2, seq_len: 64, steps: 1, optimizer: {lr: 1.0e-3}}
YAML
  MODELS=("tiny:$OUT/cpu-smoke.yaml")
else
  if [ $DRY -eq 1 ] && ! command -v nvidia-smi >/dev/null; then gpus=8; device="(dry run)"
  else gpus=$(nvidia-smi -L | wc -l); device="$gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"; fi
  MODELS=("olmo2_190M:$ROOT/recipes/olmo2-190m.yaml" "olmo2_1B:$ROOT/recipes/olmo2-1b.yaml")
fi
WORLDS=()
for n in 1 2 4 8; do [ "$n" -le "$gpus" ] && WORLDS+=("$n"); done
[ ${#WORLDS[@]} -gt 0 ] || { echo "bench_scaling_device.sh: no GPU found (nvidia-smi -L)" >&2; exit 2; }

# The recipes train on the prepared dolma2 corpus, which a bare device lacks (building it needs
# Debian/npm packages and the dolma2 tokenizer). Like bench/bench_train_step, which feeds random
# tokens, the benchmark needs only tokens of the right shape: the byte tokenizer over the committed
# sample text, with the model's vocabulary kept at 100352 rows (it must only cover the tokenizer's ids),
# so the embedding, the head and the loss cost exactly what they cost on dolma2 tokens. No validation
# and no checkpoint before the end: the timed steps are training steps only.
DATA=(--set data.tokenizer=bytes --set "data.train=[$ROOT/data/corpus/sample/train]" --set 'data.validation={}'
      --set data.verify=never --set eval.every=0 --set checkpoint.every=0)

run_logged() {  # LOG CMD...: records the command, runs it (unless --dry-run) with its output in LOG
  local log=$1; shift
  printf '%q ' "$@" >> "$OUT/commands.txt"; echo >> "$OUT/commands.txt"
  if [ $DRY -eq 1 ]; then printf '%q ' "$@"; echo; return 0; fi
  echo "== $*" >&2
  timeout 900 "$@" > "$log" 2>&1; local rc=$?
  [ $rc -eq 0 ] || { echo "   failed (exit $rc), see $log" >&2; tail -5 "$log" >&2; }
  return $rc
}

# fathom_result RUN_DIR LOG: "tokens/s peak_bytes moment_bytes" from metrics.jsonl (median over the
# steps after the warm-up; peak is rank 0's allocator peak, absent on the CPU) and the start-up line.
fathom_result() {
  python3 - "$1/metrics.jsonl" "$2" "$WARMUP" <<'PY'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
train = [r for r in rows if r.get("kind") == "train" and r["step"] > int(sys.argv[3])]
if not train:
    sys.exit(f"{sys.argv[1]}: no logged step after the warm-up")
tps = statistics.median(r["tokens_per_second"] for r in train)
peak = max((r.get("memory_peak_bytes", -1) for r in train), default=-1)
m = re.search(r"optimizer moments (\d+) (KiB|MiB|GiB) per rank", open(sys.argv[2]).read())
moments = int(m.group(1)) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)] if m else -1
print(f"{tps:.1f} {peak:.0f} {moments}")
PY
}

RESULTS="$OUT/results.tsv"   # system model world tokens/s peak_bytes moment_bytes
: > "$RESULTS"
for spec in "${MODELS[@]}"; do
  model=${spec%%:*} recipe=${spec#*:}
  for n in "${WORLDS[@]}"; do
    for zero in 0 1; do
      [ "$n" -eq 1 ] && [ $zero -eq 1 ] && continue   # one rank has nothing to shard
      name="fathom-$model-n$n-zero$zero" dir="$OUT/runs/$name"
      extra=(); [ $SMOKE -eq 1 ] || extra=("${DATA[@]}")
      if run_logged "$OUT/$name.log" "${MPI[@]}" -np "$n" "$BIN" train "$recipe" "${extra[@]}" \
           --set train.steps=$((WARMUP + STEPS)) --set log.every=1 --set train.zero=$zero \
           --set "log.dir=$dir" --overwrite && [ $DRY -eq 0 ]; then
        read -r tps peak moments < <(fathom_result "$dir" "$OUT/$name.log") &&
          printf 'fathom%s\t%s\t%s\t%s\t%s\t%s\n' "$([ $zero -eq 1 ] && echo ' ZeRO-1')" "$model" "$n" \
            "$tps" "$peak" "$moments" >> "$RESULTS"
      fi
      rm -rf "$dir/checkpoints"   # the final checkpoint is no result (the 1B's is 12 GiB)
    done
    [ $SMOKE -eq 1 ] && continue
    name="hf-$model-n$n"
    if run_logged "$OUT/$name.log" torchrun --standalone --nproc-per-node "$n" "$ROOT/bench/hf_train_reference.py" \
         --steps "$STEPS" --warmup "$WARMUP" "$model" && [ $DRY -eq 0 ]; then
      # One GPU: the single-process row | system | model | batch x seq | step ms | tokens/s | MFU | peak GiB | held GiB |;
      # more: | system | model | world | batch x seq per GPU | step ms | tokens/s | tokens/s per GPU | MFU | peak GiB | held GiB |
      awk -F'|' -v n="$n" '/^\| HF/ {
          ddp = (NF == 12); m = $3; gsub(/ /, "", m)
          t = ddp ? $7 : $6; gsub(/[ ,]/, "", t); p = ddp ? $10 : $8; gsub(/ /, "", p)
          printf "PyTorch DDP\t%s\t%s\t%s\t%.0f\t-1\n", m, n, t, p * 2^30 }' "$OUT/$name.log" >> "$RESULTS"
    fi
  done
done

# Correctness on 2 ranks: the same global batch as 1 rank with grad_accum 2 reads the same sequences,
# so the loss curves agree up to the reduction's rounding (bf16 on the GPU: 2% relative per step).
check_recipe=${MODELS[0]#*:}
CHECK_STEPS=20 TOL=0.02; [ $SMOKE -eq 1 ] && TOL=1e-4
checks=()
extra=(); [ $SMOKE -eq 1 ] || extra=("${DATA[@]}" --set train.seq_len=1024)
run_logged "$OUT/check-n1.log" "${MPI[@]}" -np 1 "$BIN" train "$check_recipe" "${extra[@]}" --set train.grad_accum=2 \
  --set train.steps=$CHECK_STEPS --set log.every=1 --set "log.dir=$OUT/runs/check-n1" --overwrite; rc1=$?
run_logged "$OUT/check-n2.log" "${MPI[@]}" -np 2 "$BIN" train "$check_recipe" "${extra[@]}" \
  --set train.steps=$CHECK_STEPS --set log.every=1 --set "log.dir=$OUT/runs/check-n2" --overwrite; rc2=$?
if [ $DRY -eq 0 ]; then
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; then
    checks+=("$(python3 - "$OUT/runs/check-n1/metrics.jsonl" "$OUT/runs/check-n2/metrics.jsonl" "$TOL" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, open(path))) if r.get("kind") == "train"}
one, two, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if sorted(one) != sorted(two) or not one:
    print(f"loss curve 2 vs 1 rank: FAIL (steps differ: {len(one)} vs {len(two)})"); sys.exit()
worst = max(abs(two[s] - one[s]) / abs(one[s]) for s in one)
print(f"loss curve 2 ranks vs 1 rank x grad_accum 2, {len(one)} steps: max relative difference {worst:.2e} "
      f"(tolerance {tol:g}): {'PASS' if worst <= tol else 'FAIL'}")
PY
)")
  else checks+=("loss curve 2 vs 1 rank: FAIL (a run failed, see check-n1.log / check-n2.log)"); fi
  rm -rf "$OUT"/runs/check-n*/checkpoints
fi

# A rank killed mid-run: SIGKILL to rank 1 after a few checkpoints; the job must end non-zero with an
# error, and every checkpoint left (and `latest`) must be complete.
kill_dir="$OUT/runs/check-kill"
kill_cmd=("${MPI[@]}" -np 2 "$BIN" train "$check_recipe" "${extra[@]}" --set train.steps=100000
          --set checkpoint.every=5 --set checkpoint.keep_last=100 --set log.every=1 --set "log.dir=$kill_dir" --overwrite)
printf '%q ' "${kill_cmd[@]}" >> "$OUT/commands.txt"; echo "   # then kill -9 one rank" >> "$OUT/commands.txt"
if [ $DRY -eq 1 ]; then printf '%q ' "${kill_cmd[@]}"; echo "   # then kill -9 one rank"
else
  "${kill_cmd[@]}" > "$OUT/check-kill.log" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 1200); do   # until the second checkpoint exists (at most 10 minutes)
    [ -e "$kill_dir/checkpoints/step_00000010" ] && break
    kill -0 $mpirun_pid 2>/dev/null || break; sleep 0.5
  done
  victim=$(pgrep -P $mpirun_pid | tail -1)   # Open MPI starts the ranks of one machine as its children
  if [ -n "$victim" ]; then
    sleep 1; kill -9 "$victim"
    # The job must end by itself; one still running after 5 minutes hangs, which fails the check.
    timeout 300 tail --pid=$mpirun_pid -f /dev/null || { echo "   the job outlived its killed rank by 5 minutes" >&2; kill -9 $mpirun_pid; }
    wait $mpirun_pid; kill_rc=$?
    half=""
    for c in "$kill_dir"/checkpoints/step_*; do
      [ -f "$c/model.safetensors" ] && [ -f "$c/optimizer.safetensors" ] && [ -f "$c/state.json" ] || half+=" $c"
    done
    latest=$(cat "$kill_dir/checkpoints/latest" 2>/dev/null)
    [ -n "$latest" ] && [ ! -d "$kill_dir/checkpoints/$latest" ] && half+=" latest->$latest"
    error=$(grep -m1 -E 'error|exited on signal' "$OUT/check-kill.log")   # fathom's or mpirun's, naming the rank
    if [ $kill_rc -ne 0 ] && [ -n "$error" ] && [ -z "$half" ]; then verdict=PASS; else verdict=FAIL; fi
    checks+=("rank killed (SIGKILL) mid-run: exit $kill_rc, '${error:-no error message}', checkpoints complete: ${half:-yes}: $verdict")
  else
    wait $mpirun_pid
    checks+=("rank killed mid-run: FAIL (the job ended before its second checkpoint, see check-kill.log)")
  fi
  rm -rf "$kill_dir/checkpoints"
fi
[ $DRY -eq 1 ] && exit 0

commit=${FATHOM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  printf '# Data-parallel scaling: fathom vs PyTorch DDP\n\n%s, commit %s, %s; %s timed steps after %s warm-up steps (median)\n\n' \
    "$device" "$commit" "$(date -u +%Y-%m-%d)" "$STEPS" "$WARMUP"
  echo "Global batch = the recipe's per-GPU batch x world. Efficiency: tokens/s per GPU over the same system's at 1 GPU."
  echo "fathom/DDP: fathom's tokens/s over PyTorch DDP's at the same model and world (plain and ZeRO-1 both against DDP)."
  echo
  awk -F'\t' '
    function gib(b) { return b < 0 ? "-" : sprintf("%.2f", b / 2^30) }
    { sys[NR] = $1; model[NR] = $2; n[NR] = $3; tps[NR] = $4; peak[NR] = $5; mom[NR] = $6
      if ($3 == 1) base[$1, $2] = $4; if ($1 == "PyTorch DDP") ddp[$2, $3] = $4
      if ($3 == 1 && $1 == "fathom") base["fathom ZeRO-1", $2] = $4 }
    END {
      print "| system | model | GPUs | tokens/s | tokens/s per GPU | scaling efficiency | peak memory per GPU GiB | optimizer moments per GPU | fathom/DDP |"
      print "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
      for (i = 1; i <= NR; ++i) {
        per = tps[i] / n[i]; b = base[sys[i], model[i]]
        eff = b > 0 ? sprintf("%.1f%%", 100 * per / b) : "-"
        ratio = (sys[i] != "PyTorch DDP" && ddp[model[i], n[i]] > 0) ? sprintf("%.2f", tps[i] / ddp[model[i], n[i]]) : "-"
        printf "| %s | %s | %d | %.0f | %.0f | %s | %s | %s | %s |\n", sys[i], model[i], n[i], tps[i], per, eff,
               gib(peak[i]), mom[i] < 0 ? "-" : sprintf("%d bytes", mom[i]), ratio
      }
    }' "$RESULTS"
  echo; echo "## Checks (2 ranks)"; echo
  for c in "${checks[@]}"; do echo "- $c"; done
  echo; echo "## Commands"; echo; echo '```'; cat "$OUT/commands.txt"; echo '```'
} > "$OUT/scaling.md"
cat "$OUT/scaling.md"
! grep -q FAIL "$OUT/scaling.md" && [ "$(wc -l < "$RESULTS")" -gt 0 ]
