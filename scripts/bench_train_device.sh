#!/usr/bin/env bash
# fathom's training step against HF transformers + torch.compile, one after the other on the same GPU in
# one session (docs/DESIGN.md section 9): bench_train_step (from a CUDA build, carried in $BIN with any shared
# libraries the device lacks in $BIN/lib) and bench/hf_train_reference.py at the same model sizes and
# shapes. Writes $OUT/fathom.md, $OUT/hf.md (their rows, logs included) and $OUT/train_step_comparison.md:
# both rows per config plus the ratios fathom/HF of tokens/s and of peak device memory.
# Usage: scripts/bench_train_device.sh BIN OUT [SIZE...]   (SIZE: olmo2_190M, olmo2_1B; default both)
#   HF_ARGS='--loss eager' passes options to the HF reference only, FATHOM_ARGS='--recompute selective'
#   to bench_train_step only. FATHOM_COMMIT names the commit the
#   binaries were built from (a device's copy of the tree may carry a stale .git).
set -uo pipefail
BIN=${1:?usage: scripts/bench_train_device.sh BIN OUT [SIZE...]}
OUT=${2:?usage: scripts/bench_train_device.sh BIN OUT [SIZE...]}
shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BIN/bench_train_step" ] || { echo "no executable $BIN/bench_train_step (build it with -DFATHOM_CUDA=ON)" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

# Each side runs alone on the GPU; a failure of one still leaves the other's rows.
echo "== fathom"
timeout 600 "$BIN/bench_train_step" --device cuda ${FATHOM_ARGS:-} "$@" 2>&1 | tee "$OUT/fathom.md"
fathom_rc=$?
echo "== HF transformers + torch.compile"
timeout 900 python3 "$ROOT/bench/hf_train_reference.py" ${HF_ARGS:-} "$@" 2>&1 | tee "$OUT/hf.md"
hf_rc=$?

# Rows are '| system | model | batch x seq | step ms | tokens/s | MFU | peak GiB | held GiB |'; numbers
# may hold thousands separators.
awk -F'|' -v device="$device" -v commit="${FATHOM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}" -v today="$(date +%Y-%m-%d)" '
  function num(s) { gsub(/[ ,]/, "", s); return s + 0 }
  FNR == 1 { side = (FILENAME ~ /fathom\.md$/) ? "fathom" : "hf" }
  /^\| / && $3 !~ /model|---/ {
    model = $3; gsub(/ /, "", model)
    row[side, model] = $0; tps[side, model] = num($6); mem[side, model] = num($8); held[side, model] = num($9)
    shape[model] = $4
    if (!(model in seen)) { seen[model] = 1; order[++n] = model }
  }
  END {
    printf "# Training step: fathom vs HF transformers + torch.compile\n\n%s, commit %s, %s\n\n", device, commit, today
    print "| model | batch x seq | fathom tok/s | HF tok/s | fathom/HF tok/s | fathom peak GiB | HF peak GiB | fathom/HF memory | fathom/HF held |"
    print "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    for (i = 1; i <= n; ++i) {
      m = order[i]
      f = ((("fathom", m) in tps) && tps["fathom", m] > 0); h = ((("hf", m) in tps) && tps["hf", m] > 0)
      printf "| %s |%s| %s | %s | %s | %s | %s | %s | %s |\n", m, shape[m],
             f ? sprintf("%.0f", tps["fathom", m]) : "failed", h ? sprintf("%.0f", tps["hf", m]) : "failed",
             (f && h) ? sprintf("%.2f", tps["fathom", m] / tps["hf", m]) : "-",
             f ? sprintf("%.1f", mem["fathom", m]) : "-", h ? sprintf("%.1f", mem["hf", m]) : "-",
             (f && h && mem["hf", m] > 0) ? sprintf("%.2f", mem["fathom", m] / mem["hf", m]) : "-",
             (f && h && held["hf", m] > 0) ? sprintf("%.2f", held["fathom", m] / held["hf", m]) : "-"
    }
    print "\nRows as measured:\n"
    print "| system | model | batch x seq | step ms (median) | tokens/s | MFU | peak GiB | held GiB |"
    print "| --- | --- | --- | --- | --- | --- | --- | --- |"
    for (i = 1; i <= n; ++i) for (s = 0; s < 2; ++s) {
      key = (s == 0 ? "fathom" : "hf") SUBSEP order[i]
      if (key in row) print row[key]
    }
  }' "$OUT/fathom.md" "$OUT/hf.md" > "$OUT/train_step_comparison.md"
echo "== comparison ($OUT/train_step_comparison.md)"
cat "$OUT/train_step_comparison.md"
[ $fathom_rc -eq 0 ] && [ $hf_rc -eq 0 ]
