#!/usr/bin/env bash
# Runs the MoDA attention benchmarks side by side on the GPU machine: fathom's four MoDA kernels
# (paper Table 7), the group kernel against fathom's flash attention without depth (paper Table 2),
# and PyTorch SDPA flash / cuDNN attention at the Table 2 shapes (bench/attention_reference.py
# --table2), so all three come from one run on one device. Writes one Markdown log per part, plus
# device.txt (nvidia-smi, commit).
# Usage: scripts/bench_moda_device.sh BIN OUT
#   BIN  the bench_moda_attention binary (a CUDA build: ninja -C build-cuda bench_moda_attention)
#   OUT  folder for the logs (created)
# Extra options for both programs can come through MODA_BENCH_ARGS (e.g. "--max-t 16384 --min-reps 3");
# FATHOM_COMMIT names the commit the binary was built from (a device's copy may carry a stale .git).
set -euo pipefail
bin=${1:?usage: scripts/bench_moda_device.sh BIN OUT}
out=${2:?usage: scripts/bench_moda_device.sh BIN OUT}
[ -x "$bin" ] || { echo "bench_moda_device: $bin is not an executable" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
# shellcheck disable=SC2086  # MODA_BENCH_ARGS is a list of options
args=(${MODA_BENCH_ARGS:-})
{
  date -u +"%Y-%m-%d %H:%M UTC"
  echo "${FATHOM_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo "commit unknown")}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv 2>/dev/null || true
} > "$out/device.txt"
"$bin" table7 "${args[@]}" | tee "$out/moda_table7.md"
"$bin" table2 "${args[@]}" | tee "$out/moda_table2.md"
python3 "$here/bench/attention_reference.py" --table2 "${args[@]}" | tee "$out/reference_table2.md"
echo "logs in $out"
