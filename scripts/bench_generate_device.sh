#!/usr/bin/env bash
# fathom's greedy decoding against the memory-bandwidth limit and against its peers, in one run on one GPU
# on the same weights (docs/DESIGN.md section 9): bench/bench_generate (fathom), bench/gpt_fast_reference.py
# (gpt-fast, its decode step compiled with torch.compile(mode="reduce-overhead"); its model file is Llama's,
# adapted to OLMo2's block by the script for the OLMo2 sizes) and bench/hf_generate_reference.py (HF generate, static cache; with
# HF_COMPILE=1 also torch.compile). Every row gives ms per decoding step, the bytes the step must read
# (weights + KV cache at the steps' mean length, train/measure/decode_traffic.h) and % of roofline: those
# bytes over the step time, over the copy bandwidth each process measures on the same GPU (a 1 GiB
# device-to-device copy, read + write bytes counted).
#
# Sizes: olmo2_190M, olmo2_1B (fathom's ladder) and llama3_1B, Llama-3.2-1B's shape (d 2048, 16 layers,
# GQA 32/8, FFN 8192, vocab 128256, tied head, RoPE theta 500000 with llama3 scaling). Each is trained by
# fathom for TRAIN_STEPS steps on the quickstart corpus (dolma2 tokenizer) from its random init, so that its
# greedy choices are decisive (a random model's near-ties would flip between bf16 kernels) and vary (models trained
# 30 steps repeated one id in every cell of bench/results/2026-12-07_gated_step_swiglu_and_gpt_fast_h100.md, which
# checks little), and exported with `fathom export --format hf` as the one folder all three systems read (fathom as
# hf:DIR); the run's checkpoints, about 14 GB at 1B with the optimizer's state, are removed once the export is
# written. The prompt of context C is Moby Dick's dolma2 ids cut at C. Grid: context CONTEXTS x batch BATCHES,
# NEW_TOKENS new tokens.
# Greedy agreement: each peer's first NEW_TOKENS ids per context and batch against fathom's
# (bench/compare_generate_tokens.py: AGREE, or DISAGREE at the first differing position).
#
# Usage: scripts/bench_generate_device.sh BUILD OUT [SIZE...]   (default: olmo2_190M olmo2_1B llama3_1B)
#   BUILD: a CUDA build folder (fathom, bench/bench_generate). OUT: where generate.md and the logs go.
#   Needs .ref/gpt-fast.tar.gz (cp ../shared/reference/gpt-fast.tar.gz .ref/; .ref/ is ignored) for the
#   gpt-fast rows; without it they are left out and said so.
# Environment: NEW_TOKENS (40, at least 32 for the agreement check), CONTEXTS (128,4096), BATCHES (1,8,32),
#   TRAIN_STEPS (200; about 10 s at 1B on an H100), REPEATS (fathom 5, peers 3), LEVERS (cublas skinny
#   skinny+fused skinny+fused+dependent skinny+fused+dependent+inside skinny+fused+dependent+inside+cluster
#   skinny+fused+dependent+inside+cluster+splitk skinny+fused+dependent+inside+cluster+splitk+prefetch: fathom's
#   decoding kernels, one row set each; the first is the one
#   the peers' tokens are checked against),
#   PEERS (gpt-fast hf: the peers run beside fathom; empty for fathom alone),
#   GPTFAST_TUNING (off; on: Inductor's coordinate-descent tuning as gpt-fast's generate.py sets it, minutes
#   more of compiling), HF_COMPILE (0), DEVICE (cuda; cpu runs the fathom side of the plumbing on a machine
#   without a GPU, e.g. with olmo2_14M and small grids).
#
# Device time, measured on an H100 (bench/results/2026-12-05_dependent_launch_gpt_fast_h100.md): the Llama shape
# with 3 levers, gpt-fast and HF took about 6.5 minutes (training and export ~20 s, fathom ~25 s a lever,
# gpt-fast's compile and warm-up 24-29 s for each of the 6 cells, 38-44 s on 2026-12-06, HF ~1 min). gpt-fast
# runs for every size, so the defaults (3 sizes, 8 levers) take about 23 minutes; for shorter runs name one size
# and LEVERS=skinny+fused+dependent+inside+cluster+splitk+prefetch (fathom's defaults).
set -uo pipefail
BUILD=${1:?usage: scripts/bench_generate_device.sh BUILD OUT [SIZE...]}
OUT=${2:?usage: scripts/bench_generate_device.sh BUILD OUT [SIZE...]}
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(olmo2_190M olmo2_1B llama3_1B)
N=${NEW_TOKENS:-40}
CONTEXTS=${CONTEXTS:-128,4096}
BATCHES=${BATCHES:-1,8,32}
TRAIN_STEPS=${TRAIN_STEPS:-200}
REPEATS=${REPEATS:-}
TUNING=${GPTFAST_TUNING:-off}
DEVICE=${DEVICE:-cuda}
PEERS=${PEERS-gpt-fast hf}
LEVERS=${LEVERS:-cublas skinny skinny+fused skinny+fused+dependent skinny+fused+dependent+inside skinny+fused+dependent+inside+cluster skinny+fused+dependent+inside+cluster+splitk skinny+fused+dependent+inside+cluster+splitk+prefetch}

# A peer cut by its time limit can leave processes running (the reference script, or torch's compile workers, which
# start sessions of their own that the time limit's signal does not reach); they would share the GPU and the CPUs
# with every run after it. Stops any whose command line names the script or the compile workers.
stop_leftovers() {
  pkill -f "$1" 2> /dev/null
  pkill -f torch._inductor.compile_worker 2> /dev/null
  return 0
}

# The environment of a decoding lever, each set explicitly: cuBLASLt and the separate ops, the skinny GEMM
# with its grouped projections, that with the fused decode prologue and pre-norm residual step, that with
# the step's kernels launched as dependent launches (kernels/runtime/dependent_launch.h), and that with the
# prologue inside attention's split kernel, the residual steps inside the MLP's gate/up launch and the next
# block's q/k/v launch, and attention's splits merged inside its split kernel where the grid has many; and that with
# the splits of short caches merged in a thread-block cluster; and that with the narrow GEMMs' K split across the CTAs
# of a cluster where their tiles leave half the SMs idle (FATHOM_SKINNY_SPLIT_K_CTAS=auto); and that with the GEMMs'
# L2 prefetch of their first weights only where rows are short or K is split (FATHOM_SKINNY_L2_PREFETCH=auto; the
# levers before it prefetch in every launch, as the GEMM did before the rule; fathom's default).
lever_env() {
  local skinny=never fused=separate dependent=off inside=separate merge=never cluster=off splitk=off prefetch=always
  case $1 in
    cublas) ;;
    skinny) skinny=auto ;;
    skinny+fused) skinny=auto fused=fused ;;
    skinny+fused+dependent) skinny=auto fused=fused dependent=on ;;
    skinny+fused+dependent+inside) skinny=auto fused=fused dependent=on inside=fused merge=auto ;;
    skinny+fused+dependent+inside+cluster) skinny=auto fused=fused dependent=on inside=fused merge=auto cluster=on ;;
    skinny+fused+dependent+inside+cluster+splitk)
      skinny=auto fused=fused dependent=on inside=fused merge=auto cluster=on splitk=auto ;;
    skinny+fused+dependent+inside+cluster+splitk+prefetch)
      skinny=auto fused=fused dependent=on inside=fused merge=auto cluster=on splitk=auto prefetch=auto ;;
    *) echo "unknown lever '$1' (cublas, skinny, skinny+fused, skinny+fused+dependent, skinny+fused+dependent+inside," \
            "skinny+fused+dependent+inside+cluster, skinny+fused+dependent+inside+cluster+splitk," \
            "skinny+fused+dependent+inside+cluster+splitk+prefetch)" >&2; exit 2 ;;
  esac
  echo "FATHOM_SKINNY_MATMUL=$skinny FATHOM_DECODE_PROLOGUE=$fused FATHOM_ADD_RMS_NORM=$fused" \
       "FATHOM_DEPENDENT_LAUNCH=$dependent FATHOM_PROLOGUE_IN_ATTENTION=$inside FATHOM_RESIDUAL_STEP_IN_GEMM=$inside" \
       "FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=$inside FATHOM_MERGE_IN_SPLIT=$merge FATHOM_MERGE_IN_CLUSTER=$cluster" \
       "FATHOM_SKINNY_SPLIT_K_CTAS=$splitk FATHOM_SKINNY_L2_PREFETCH=$prefetch"
}
work=/tmp/fathom-gen
mkdir -p "$OUT" "$work" || exit 2
fathom=$BUILD/fathom

# The prompt: enough of Moby Dick for the longest context (about 5,600 ids from 24,000 characters).
text=$(tr '\n' ' ' < data/corpus/quickstart/validation/moby_dick.txt | head -c 24000)
"$fathom" tokenizer encode --tokenizer dolma2 "$text" > "$work/ids.txt" || { echo "tokenizing the prompt failed"; exit 1; }

gpt_fast=""
if [ -f .ref/gpt-fast.tar.gz ]; then
  tar -xzf .ref/gpt-fast.tar.gz -C "$work" && [ -f "$work/gpt-fast/model.py" ] && gpt_fast=$work/gpt-fast
fi

# The model block of a size's recipe.
model_yaml() {
  case $1 in
    llama3_1B)
      echo "{d_model: 2048, n_layers: 16, n_heads: 32, n_kv_heads: 8, ffn_hidden: 8192, vocab_size: 128256," \
           "norm: pre, qk_norm: false, tie_embeddings: true, norm_eps: 1.0e-5, rope_theta: 500000," \
           "rope_scaling: {type: llama3, factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}}"
      ;;
    *) echo "{size: $1}" ;;
  esac
}

md=$OUT/generate.md
agreement=$OUT/agreement.txt
: > "$agreement"
{
  echo "# Generation: fathom, gpt-fast and HF transformers against the copy bandwidth"
  echo
  echo "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "$DEVICE"), commit ${FATHOM_COMMIT:-unknown}, $(date +%Y-%m-%d);" \
       "greedy, bf16, prompt of C tokens (Moby Dick, dolma2), $N new tokens, models trained $TRAIN_STEPS steps" \
       "from random init. MB/step: weights + KV cache at C + $((N / 2)) positions; % of roofline: (MB/step /" \
       "ms/step) / the copy bandwidth measured by each process (1 GiB D2D copy, read + write counted)."
  echo
  python3 -c "import sys; sys.path.insert(0, 'bench'); import generate_bench_common as c; print(c.COLUMNS)"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
} > "$md"

for size in "${sizes[@]}"; do
  run=$work/$size
  cat > "$work/$size.yaml" <<YAML
name: gen-$size
model: $(model_yaml "$size")
data: {tokenizer: dolma2, train: [data/corpus/quickstart/train]}
train: {device: $DEVICE, batch_size: 8, seq_len: 256, steps: $TRAIN_STEPS, optimizer: {lr: 1.0e-3}, schedule: {warmup_steps: 5}}
log: {dir: $run}
YAML
  "$fathom" train "$work/$size.yaml" --overwrite > "$OUT/train_$size.log" 2>&1 || { tail -5 "$OUT/train_$size.log"; continue; }
  "$fathom" export --format hf --checkpoint "$run" --out "$run-hf" --dtype bf16 --overwrite > /dev/null || continue
  rm -rf "$run/checkpoints"
  grid=(--ids "$work/ids.txt" --context "$CONTEXTS" --batch "$BATCHES" --new-tokens "$N")

  # One row set per decoding lever; the first lever's tokens are the ones the peers are compared with, and
  # every other lever's are compared with the first's.
  first=""
  for lever in $LEVERS; do
    env $(lever_env "$lever") timeout 240 "$BUILD/bench/bench_generate" "hf:$run-hf" "${grid[@]}" \
      --label "$size $lever" --repeats "${REPEATS:-5}" --tokens-out "$OUT/tokens_fathom_${size}_$lever.txt" \
      2> "$OUT/fathom_${size}_$lever.err" | tee -a "$md"
    if [ -z "$first" ]; then
      first=$lever
      cp "$OUT/tokens_fathom_${size}_$lever.txt" "$OUT/tokens_fathom_$size.txt"
    else
      python3 bench/compare_generate_tokens.py "$OUT/tokens_fathom_$size.txt" "$OUT/tokens_fathom_${size}_$lever.txt" \
        --names "fathom $first" "fathom $lever" --label "$size" --min-tokens 32 >> "$agreement"
    fi
  done

  if [[ " $PEERS " == *" gpt-fast "* ]]; then
    if [ -n "$gpt_fast" ]; then
      TORCHINDUCTOR_CACHE_DIR=$work/inductor timeout 360 python3 bench/gpt_fast_reference.py "$run-hf" \
        --gpt-fast "$gpt_fast" "${grid[@]}" --label "$size" --repeats "${REPEATS:-3}" --tuning "$TUNING" \
        --tokens-out "$OUT/tokens_gptfast_$size.txt" 2> "$OUT/gptfast_$size.err" | tee -a "$md"
      stop_leftovers bench/gpt_fast_reference.py
      python3 bench/compare_generate_tokens.py "$OUT/tokens_fathom_$size.txt" "$OUT/tokens_gptfast_$size.txt" \
        --names fathom gpt-fast --label "$size" --min-tokens 32 >> "$agreement"
    else
      echo "gpt-fast: .ref/gpt-fast.tar.gz missing, no gpt-fast rows for $size" >> "$agreement"
    fi
  fi

  if [[ " $PEERS " == *" hf "* ]]; then
    timeout 300 python3 bench/hf_generate_reference.py "$run-hf" "${grid[@]}" --label "$size" --repeats "${REPEATS:-3}" \
      --tokens-out "$OUT/tokens_hf_$size.txt" 2> "$OUT/hf_$size.err" | tee -a "$md"
    stop_leftovers bench/hf_generate_reference.py
    python3 bench/compare_generate_tokens.py "$OUT/tokens_fathom_$size.txt" "$OUT/tokens_hf_$size.txt" \
      --names fathom HF --label "$size" --min-tokens 32 >> "$agreement"
    if [ "${HF_COMPILE:-0}" = 1 ]; then
      timeout 400 python3 bench/hf_generate_reference.py "$run-hf" "${grid[@]}" --label "$size" --repeats "${REPEATS:-3}" --compile \
        2> "$OUT/hf_compile_$size.err" | tee -a "$md"
      stop_leftovers bench/hf_generate_reference.py
    fi
  fi
done
{
  echo
  echo "## Greedy agreement (first $N new tokens, same weights and prompts)"
  echo
  sed 's/^/    /' "$agreement"
} >> "$md"
cat "$md"
