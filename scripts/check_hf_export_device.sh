#!/usr/bin/env bash
# On the GPU machine (torch + transformers installed): checks that fathom's remote-code HF exports of a
# MoDA (attn_kv+ffn_kv), a MoD (causal predictor) and a DSLA hybrid model, each trained a few steps on
# the quickstart corpus, load with AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True),
# give fathom's full-forward logits (`fathom logits`) and greedy-generate what `fathom generate` does.
# Both sides run on the CPU in fp32 (a CUDA build of fathom runs there with --device cpu), so they
# can agree to rounding and token for token.
#
#   scripts/check_hf_export_device.sh [--bin build/fathom] [--steps N]
#
# Writes $OUT/hf_export_check.md (or ./hf_export_check.md without OUT); exits non-zero on a mismatch,
# or when torch or transformers is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/fathom
steps=60
while (($#)); do
  case "$1" in
    --bin) bin=${2:?--bin needs a path}; shift 2 ;;
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    *) echo "check_hf_export_device.sh: unknown argument '$1' (expected --bin PATH, --steps N)" >&2; exit 2 ;;
  esac
done
report="${OUT:-.}/hf_export_check.md"
status=0
python3 scripts/check_hf_export.py --fathom "$bin" --transformers --steps "$steps" --report "$report" || status=$?
if ((status == 77)); then
  echo "check_hf_export_device.sh: torch or transformers is missing; nothing was checked" >&2
  exit 1
fi
exit "$status"
