#!/usr/bin/env bash
# The second run, on the same machine: the first run's builds and models (/tmp/s1); W in registers with the
# first-step prefetch in both builds, the base again; then fathom and gpt-fast on the Llama shape side by side.
set -uo pipefail
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
W=/tmp/s3; mkdir -p $W; M=/tmp/s1/m
pack() { (cd /tmp && tar -czf $OUT/s3.tar.gz s3); }
trap pack EXIT
ls $M build/bench/bench_generate build_early/bench/bench_generate > $W/ls.txt 2>&1 || { cat $W/ls.txt; echo "not warm"; exit 3; }
for f in .debs/*.deb; do dpkg -x $f /; done; ldconfig
for size in olmo2_1B olmo2_190M llama3_1B; do
  for b in build build_early; do
    v=${b#build}; v=${v:-_wait}
    FATHOM_EXPERIMENT_EARLY_W=1 LD_LIBRARY_PATH=$PWD/$b/lib:/usr/local/cuda/lib64 timeout 60 $b/bench/bench_generate hf:$M/$size-hf --ids /tmp/s1/ids.txt --context 128,4096 --batch 1,8 --new-tokens 40 --repeats 4 \
      --label "$size trigger$v prefetch_step+w" 2>/dev/null | tee -a $W/generate.md
    LD_LIBRARY_PATH=$PWD/$b/lib:/usr/local/cuda/lib64 timeout 60 $b/bench/bench_generate hf:$M/$size-hf --ids /tmp/s1/ids.txt --context 128 --batch 1 --new-tokens 40 --repeats 4 \
      --label "$size trigger$v prefetch_step again" 2>/dev/null | tee -a $W/generate.md
  done
done
echo "ab at $(el)s"
export LD_LIBRARY_PATH=$PWD/build/lib:/usr/local/cuda/lib64
mkdir -p /tmp/gf && tar -xzf .ref/gpt-fast.tar.gz -C /tmp/gf
grid=(--ids /tmp/s1/ids.txt --context 128,4096 --batch 1,8,32 --new-tokens 40)
timeout 100 build/bench/bench_generate hf:$M/llama3_1B-hf "${grid[@]}" --label "llama3_1B" --repeats 5 --tokens-out $W/tokens_fathom.txt 2>/dev/null | tee -a $W/peers.md
TORCHINDUCTOR_CACHE_DIR=/tmp/inductor timeout $(( 470 - $(el) )) python3 bench/gpt_fast_reference.py $M/llama3_1B-hf --gpt-fast /tmp/gf/gpt-fast "${grid[@]}" --label llama3_1B --repeats 3 --tuning off --tokens-out $W/tokens_gptfast.txt 2> $W/gptfast.err | tee -a $W/peers.md
python3 bench/compare_generate_tokens.py $W/tokens_fathom.txt $W/tokens_gptfast.txt --names fathom gpt-fast --label llama3_1B --min-tokens 32 | tee -a $W/agreement.txt
echo "end at $(el)s"
