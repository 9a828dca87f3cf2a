#!/usr/bin/env bash
# Builds fathom's libFuzzer targets (tests/fuzz) with clang + ASan + UBSan in build-fuzz and runs each
# for SECONDS_PER_TARGET seconds from its seed corpus, then prints runs, coverage and crashes per target.
# Usage: scripts/run_fuzzers.sh [SECONDS_PER_TARGET (default 180)] [JOBS (default: nproc)]
set -euo pipefail
seconds="${1:-180}"
jobs="${2:-$(nproc)}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
cd "$root"

CC=clang CXX=clang++ cmake -B "$build" -G Ninja -DFATHOM_FUZZ=ON -DFATHOM_CUDA=OFF -DFATHOM_BUILD_TESTS=OFF >/dev/null
ninja -C "$build" -j"$jobs" fathom_fuzzers

work="$build/fuzz-runs"
mkdir -p "$work"
summary=()
status=0
for source in tests/fuzz/fuzz_*.cpp; do
  name="$(basename "$source" .cpp)"   # fuzz_<target>
  target="${name#fuzz_}"
  corpus="$work/$target/corpus"       # scratch: grows during the run, seeds stay untouched
  artifacts="$work/$target/artifacts/"
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/seeds/"$target"/* "$corpus"/ 2>/dev/null || true
  log="$work/$target/fuzz.log"
  echo "== $target: ${seconds}s" >&2
  set +e
  # Leaks count as findings too (a parser that throws mid-way must free what it built); where
  # LeakSanitizer cannot run (ptrace-restricted containers) pass ASAN_OPTIONS=detect_leaks=0.
  ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1}" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    "$build/tests/fuzz/$name" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
  ft="$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')"
  crashes="$(find "$artifacts" -type f | wc -l)"
  [ "$rc" -ne 0 ] && status=1
  summary+=("$(printf '%-16s exit %-3s runs %-10s cov %-6s ft %-6s findings %s' "$target" "$rc" "$runs" "$cov" "$ft" "$crashes")")
done
echo
echo "fuzz summary (${seconds}s per target; logs and findings under $work):"
printf '  %s\n' "${summary[@]}"
exit "$status"
