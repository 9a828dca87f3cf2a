#!/usr/bin/env bash
# Tokenizes the reference corpus into the token shards the `reference` tables train on:
#   data/prepared/reference/train/                    every file of data/corpus/full/train/
#   data/prepared/reference/validation/<NAME>/        moby_dick, sotu_recent, linux_filesystems, python_howto
#   data/prepared/reference/manifest.json             token and document counts, shard checksums
# with the committed tokenizer data/tokenizers/reference-8192.json, on every core.
#
# The corpus comes as the archive scripts/build_corpus.sh writes (data/corpus/full.tar.xz, about
# 24 MB), so that it travels to a machine without network access; it is unpacked into
# data/corpus/full/ first (replacing what is there). Run from anywhere:
#   scripts/prepare_reference_data.sh [ARCHIVE]      (default: data/corpus/full.tar.xz)
# The fathom binary is build/fathom, or $FATHOM.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archive="${1:-$repo_root/data/corpus/full.tar.xz}"
fathom="${FATHOM:-$repo_root/build/fathom}"
tokenizer="$repo_root/data/tokenizers/reference-8192.json"
corpus="$repo_root/data/corpus/full"
out="$repo_root/data/prepared/reference"
readonly VALIDATION=(moby_dick=moby_dick.txt sotu_recent=sotu_2015-2021.txt
                     linux_filesystems=linux_filesystems.txt python_howto=python_howto.txt)

fail() { echo "error: $*" >&2; exit 1; }
[[ $# -le 1 ]] || fail "usage: $0 [ARCHIVE] (one argument at most, got $#)"
[[ -f $archive ]] || fail "$archive: no such archive; build it with scripts/build_corpus.sh"
[[ -x $fathom ]] || fail "$fathom: no fathom binary; build it (cmake --build build --target fathom) or set FATHOM"
[[ -f $tokenizer ]] || fail "$tokenizer: the reference tokenizer is missing"

echo "unpacking $archive into $corpus"
unpacked="$(mktemp -d "$repo_root/data/corpus/.unpack.XXXXXX")"
trap 'rm -rf "$unpacked"' EXIT
tar -xJf "$archive" -C "$unpacked" || fail "$archive: not a readable .tar.xz archive"
[[ -d $unpacked/full/train && -d $unpacked/full/validation ]] ||
  fail "$archive: holds no full/train and full/validation folders"
validation_args=()
for domain in "${VALIDATION[@]}"; do
  file="$unpacked/full/validation/${domain#*=}"
  [[ -s $file ]] || fail "$archive: holds no full/validation/${domain#*=}"
  validation_args+=("${domain%%=*}=$corpus/validation/${domain#*=}")
done
train_files=("$unpacked"/full/train/*.txt)
[[ -s ${train_files[0]} ]] || fail "$archive: holds no training text (full/train/*.txt)"
rm -rf "$corpus"
mv "$unpacked/full" "$corpus"

train_files=("$corpus"/train/*.txt)
echo "tokenizing ${#train_files[@]} training files and ${#VALIDATION[@]} validation domains with $(basename "$tokenizer")"
"$fathom" data prep --tokenizer "$tokenizer" --out "$out" --threads 0 \
  --train "${train_files[@]}" --validation "${validation_args[@]}"
echo "wrote $out (counts in $out/manifest.json)"
