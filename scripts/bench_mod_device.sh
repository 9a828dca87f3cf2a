#!/usr/bin/env bash
# MoD's training step against the dense model on one GPU in one session: bench_train_step (from a CUDA
# build in $BIN) for each size, dense and with every other block routed at capacity C (default 0.125),
# then the ratios MoD/dense of counted FLOPs per token, of step time and of peak memory.
# Writes $OUT/mod_bench.md. Usage: scripts/bench_mod_device.sh BIN OUT [C] [CONFIG...]
#   CONFIG as bench_train_step takes it (default olmo2_190M:16x2048 olmo2_1B:4x4096).
set -uo pipefail
BIN=${1:?usage: scripts/bench_mod_device.sh BIN OUT [C] [CONFIG...]}
OUT=${2:?usage: scripts/bench_mod_device.sh BIN OUT [C] [CONFIG...]}
C=${3:-0.125}
shift $(( $# < 3 ? $# : 3 ))
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(olmo2_190M:16x2048 olmo2_1B:4x4096)
mkdir -p "$OUT" || exit 2
rows="$OUT/rows.md"
: > "$rows"
for config in "${configs[@]}"; do
  for mod in 0 "$C"; do
    args=(--device cuda --warmup 3 --steps 10 "$config")
    [ "$mod" = 0 ] || args+=(--mod "$mod")
    timeout 300 "$BIN/bench_train_step" "${args[@]}" | grep '^| fathom' | tee -a "$rows"
  done
done
# Row columns: | system | model | batch x seq | step ms | tokens/s | MFU | peak GiB | held GiB | GFLOP/token |
awk -F'|' -v device="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" -v today="$(date -u +%Y-%m-%d)" '
  { model = $3; gsub(/ /, "", model); mod = ($2 ~ /MoD/) ? "mod" : "dense"
    ms[mod, model] = $5 + 0; peak[mod, model] = $8 + 0; flops[mod, model] = $10 + 0
    if (!(model in seen)) { seen[model] = 1; order[++n] = model } }
  END {
    printf "%s, %s\n\n| model | FLOP ratio (counted) | step-time ratio | step-time / FLOP ratio | peak memory ratio |\n| --- | --- | --- | --- | --- |\n", device, today
    for (i = 1; i <= n; ++i) { m = order[i]
      if (ms["dense", m] > 0 && ms["mod", m] > 0 && flops["dense", m] > 0) {
        fr = flops["mod", m] / flops["dense", m]; tr = ms["mod", m] / ms["dense", m]
        printf "| %s | %.3f | %.3f | %.3f | %.3f |\n", m, fr, tr, tr / fr, peak["mod", m] / peak["dense", m]
      } else printf "| %s | failed | | | |\n", m }
    print "\n| system | model | batch x seq | step ms (median) | tokens/s | MFU | peak GiB | held GiB | train GFLOP/token |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  }' "$rows" > "$OUT/mod_bench.md"
cat "$rows" >> "$OUT/mod_bench.md"
cat "$OUT/mod_bench.md"
