#!/usr/bin/env bash
# Rewrites the recipe reference in README.md, the table between the lines
# <!-- recipe-reference:begin --> and <!-- recipe-reference:end -->, with what `fathom recipe reference`
# prints (the schema, train/recipe/recipe_schema.cpp). The ctest Readme.RecipeReferenceIsTheGeneratedOne
# fails until the two agree.
# Usage: scripts/update_recipe_reference.sh [FATHOM_BINARY]   (default: build/fathom; build it first)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/fathom}
begin='<!-- recipe-reference:begin -->'
end='<!-- recipe-reference:end -->'
if [[ ! -x $bin ]]; then
  echo "update_recipe_reference.sh: no fathom binary at $bin; build first (cmake --build build) or pass its path" >&2
  exit 1
fi
for marker in "$begin" "$end"; do
  count=$(grep -cxF -- "$marker" README.md || true)
  if [[ $count != 1 ]]; then
    echo "update_recipe_reference.sh: README.md must hold the line '$marker' exactly once (found $count)" >&2
    exit 1
  fi
done
table=$(mktemp)
readme=$(mktemp README.md.XXXXXX)
trap 'rm -f "$table" "$readme"' EXIT
"$bin" recipe reference >"$table"
awk -v begin="$begin" -v end="$end" -v table="$table" '
  $0 == begin { print; while ((getline line < table) > 0) print line; skipping = 1; next }
  $0 == end { skipping = 0 }
  !skipping { print }
' README.md >"$readme"
if cmp -s "$readme" README.md; then
  echo "README.md's recipe reference is up to date"
else
  chmod --reference=README.md "$readme"
  mv "$readme" README.md
  echo "rewrote README.md's recipe reference ($(grep -c '^| `' "$table") keys)"
fi
